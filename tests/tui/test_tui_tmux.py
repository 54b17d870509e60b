"""`doctor tui` in a real terminal (tmux, on its own server socket): it sees the finding appear on the sim
deployment (tests/tui/conftest.py) and a person approves its fix with keys; the router then has the limit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tests.serve.stack import ROOT, policy
from tests.tui.deployment import Deployment

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make debian-packages)")]


class Tmux:
    """One tmux server of our own, one window of 120x40."""

    def __init__(self) -> None:
        self.sock = f"doctor-tui-test-{os.getpid()}"

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "tui")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "tui", *keys)

    def until(self, what: str, probe: Callable[[str], bool], timeout_s: float = 120.0) -> str:
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if probe(text):
                return text
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}; the screen:\n{text}")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    try:
        yield t
    finally:
        subprocess.run(["tmux", "-L", t.sock, "kill-server"], capture_output=True, timeout=30)


def test_the_finding_appears_and_a_person_approves_its_fix_in_a_terminal(d: Deployment, tmux: Tmux) -> None:
    cmd = (f"env PYTHONPATH={ROOT} TERM=xterm-256color {sys.executable} -m doctor.cli tui --daemon {d.daemon.url} "
           f"--token-file {d.tmp / 'api-token'} --who tmux-tester --refresh 0.5s")
    tmux.run("new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", cmd)
    tmux.until("the finding on the fleet screen", lambda s: "long_prompt_share" in s and "waiting for approval" in s)
    tmux.keys("2")
    tmux.until("the findings screen", lambda s: "evidence:" in s)
    # typed as a person types: each step seen on screen before the next (keys sent in one burst can race the
    # filter box taking the focus)
    tmux.keys("/")
    tmux.until("the filter box", lambda s: "words to match" in s)
    tmux.keys("-l", "long_prompt")
    tmux.until("the filter typed", lambda s: "words to match" not in s)  # the placeholder gives way to the text
    time.sleep(0.3)
    tmux.keys("Enter")
    tmux.until("the finding's pending action", lambda s: ": pending" in s and "because long_prompt_share" in s)
    time.sleep(0.5)
    tmux.keys("a")
    shown = tmux.until("the confirmation", lambda s: "This will apply now" in s)
    assert "length_limit on router(" in shown
    tmux.keys("y")
    deadline = time.monotonic() + 60
    while policy(d.router_url)["length_limit_tokens"] != 8192 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert policy(d.router_url)["length_limit_tokens"] == 8192
    tmux.until("the applied action on screen", lambda s: ": applied" in s or ": verified" in s)
    # leave the deployment as it was for whatever runs next: the limit rolled back through the API
    applied = [r for r in d.daemon.get("/v1/actions").json()["recent"]
               if r["action"]["action"] == "length_limit" and r["status"] in ("applied", "verified")]
    for r in applied:
        assert d.daemon.post(f"/v1/actions/{r['id']}/rollback", json_body={"who": "tests"}).status_code == 200
    assert policy(d.router_url)["length_limit_tokens"] is None
