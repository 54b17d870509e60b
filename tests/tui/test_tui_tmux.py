"""`doctor tui` in a real terminal (tmux, on its own server socket), opened by `doctor demo --tui` on the demo's own
deployment: it sees the finding appear, a person approves its fix with keys, and the next frames show it applied."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.serve.stack import ROOT

pytestmark = [pytest.mark.timeout(240),
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


def test_the_demo_s_finding_appears_and_a_person_approves_its_fix_in_a_terminal(tmux: Tmux, tmp_path: Path) -> None:
    """`doctor demo --tui` in tmux: its engines, router, `doctor serve` (approve mode) and the TUI it opens, as a
    person runs it. The storm starts at once and the demo's --for knob lets its p99_spike finding report after 5 s
    (its own `for` is 90 s), so the whole run takes under a minute."""
    cmd = (f"env -u CI PYTHONPATH={ROOT} TERM=xterm-256color TMPDIR={tmp_path} {sys.executable} -m doctor.cli demo "
           "--tui --storm-at 0 --for 5 --rate 10 --time-scale 0.25 --seconds 120; echo demo-exit=$?; sleep 120")
    tmux.run("new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", cmd)
    shown = tmux.until("the TUI with the demo's timeline", lambda s: "doctor demo t=" in s and "incident 0s" in s)
    assert "fix ?" in shown  # nothing fixed yet
    tmux.keys("2")
    tmux.until("the findings screen", lambda s: "severity  status" in s)
    tmux.keys("/")
    tmux.until("the filter box", lambda s: "words to match" in s)
    tmux.keys("-l", "cold p99_spike")
    tmux.until("the filter typed", lambda s: "words to match" not in s)
    tmux.until("the storm's finding with its pending fix",
               lambda s: "cold / p99_spike" in s and "length_limit on router" in s and ": pending" in s)
    tmux.keys("Enter")  # the filter box gives the focus back to the table
    time.sleep(0.5)
    tmux.keys("a")
    shown = tmux.until("the confirmation", lambda s: "This will apply now" in s)
    assert "length_limit on router(" in shown and "p99_spike" in shown
    tmux.keys("y")
    tmux.until("the dialog gone", lambda s: "This will apply now" not in s)
    tmux.keys("1")
    shown = tmux.until("the fix on the fleet screen's timeline and the router's limit",
                       lambda s: "length_limit on router" in s and "LIMIT 8192 tok" in s)
    assert "fix ?" not in shown
    tmux.keys("q")
    shown = tmux.until("the demo's summary", lambda s: "demo-exit=" in s)
    assert "demo-exit=0" in shown, shown
    assert "approved: length_limit on router (person:" in shown and "applied: length_limit on router" in shown
