"""Chaos: the state directory full or read-only. The doctor refuses to act and says why; it never acts without its
journal line; the daemon answers an alert it cannot queue durably with 503 (Alertmanager retries), never 2xx. Once
the disk is fixed the same run acts. Real sim engine processes, the real router, `doctor diagnose` and `doctor
serve` as processes; the state directory a tmpfs of its own (tests/chaos/fs.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.conftest import Record
from tests.chaos.fs import fill, remount, small_tmpfs
from tests.chaos.procs import Done, diagnose
from tests.serve.payloads import alert, body
from tests.serve.stack import (
    ROUTER_TOKEN,
    daemon_for,
    engines,
    load,
    policy,
    router,
    seed_for_state,
    write_config,
)
from trials.live import LoadThread, SpawnedEngine

pytestmark = pytest.mark.timeout(300)
ENV = {"ROUTER_POLICY_TOKEN": ROUTER_TOKEN}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SpawnedEngine]]:
    """Hot and cold sim engines, the hot one under a storm of 9000-token documents (long_prompt_share: its first
    remedy an emergency length limit at the router)."""
    with engines(["hot", "cold"], tmp_path_factory.mktemp("fleet")) as eng:
        storm: LoadThread = load(eng["hot"].url)
        try:
            yield eng
        finally:
            storm.stop()


def _config(tmp: Path, eng: dict[str, SpawnedEngine], router_url: str, state: Path) -> Path:
    config = write_config(tmp, hot=eng["hot"].url, cold=eng["cold"].url, router_url=router_url,
                          doctor_extra='sample_s = "2s"')
    config.write_text(config.read_text().replace(f'state_dir = "{tmp / "state"}"', f'state_dir = "{state}"'))
    seed_for_state(state, "long_prompt_share|hot", held_s=100)  # earlier runs saw it: its `for` has passed
    return config


def _begun(state: Path) -> list[dict]:
    path = state / "journal.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(x) for x in lines if x.strip() and json.loads(x)["op"] == "begin"]


def _said(run: Done) -> str:
    """The doctor's last word on stderr, without the path it names."""
    return run.err.strip().splitlines()[-1].split(": '", 1)[0]


def _acts_once_fixed(config: Path, state: Path, router_url: str) -> None:
    again = diagnose(["--config", str(config), "--fix", "--verify-wait", "0"], env=ENV)
    assert "Traceback" not in again.err, again.err
    assert [a["status"] for a in again.actions() if a["action"] == "length_limit"] == ["applied"], again
    assert policy(router_url)["length_limit_tokens"] == 8192
    assert len(_begun(state)) == 1


@pytest.mark.parametrize("where", ["state_dir", "journal_short_write"])
def test_full_state_dir_refuses_to_act(where: str, fleet: dict[str, SpawnedEngine], tmp_path: Path,
                                       outcome: Record) -> None:
    """`state_dir`: the whole directory on a full file system. `journal_short_write`: only the journal's (a link to
    it), with 95 bytes left in its last page, so write() takes part of the intent's line and fails only on the
    next call: the line must not count as written."""
    with router(fleet["hot"].url, fleet["cold"].url) as r, small_tmpfs(tmp_path / "disk") as disk:
        state = disk if where == "state_dir" else tmp_path / "state"
        config = _config(tmp_path, fleet, r.url, state)
        if where == "journal_short_write":
            (disk / "journal.jsonl").write_text(" " * 4000 + "\n")  # whitespace lines are skipped by readers
            (state / "journal.jsonl").symlink_to(disk / "journal.jsonl")
        filler = fill(disk)  # the journal's own last page keeps its 95 free bytes
        refused = diagnose(["--config", str(config), "--fix", "--verify-wait", "0"], env=ENV)
        assert refused.code == 3, refused
        assert "cannot use the state directory" in refused.err and "No space left on device" in refused.err, \
            refused.err
        assert "Traceback" not in refused.err
        assert policy(r.url)["length_limit_tokens"] is None  # nothing acted
        assert _begun(state) == []
        if where == "journal_short_write":  # cut back: no torn line left for a reader to take as a step
            assert (disk / "journal.jsonl").read_text() == " " * 4000 + "\n"
        filler.unlink()
        _acts_once_fixed(config, state, r.url)
    outcome("refused", f"full {where.replace('_', ' ')}: exit 3, "
                       f"{_said(refused)}; nothing acted, nothing journaled; "
                       "acts once the space is back", lost=0)


def test_read_only_state_dir_refuses_to_act(fleet: dict[str, SpawnedEngine], tmp_path: Path,
                                            outcome: Record) -> None:
    with router(fleet["hot"].url, fleet["cold"].url) as r, small_tmpfs(tmp_path / "state") as state:
        config = _config(tmp_path, fleet, r.url, state)
        remount(state, "ro")
        try:
            refused = diagnose(["--config", str(config), "--fix", "--verify-wait", "0"], env=ENV)
        finally:
            remount(state, "rw")
        assert refused.code == 3, refused
        assert "cannot use the state directory" in refused.err and "Read-only file system" in refused.err, \
            refused.err
        assert "Traceback" not in refused.err
        assert policy(r.url)["length_limit_tokens"] is None
        assert _begun(state) == []
        _acts_once_fixed(config, state, r.url)
    outcome("refused", f"read-only: exit 3, {_said(refused)}; nothing acted; "
                       "acts once writable", lost=0)


def test_full_state_dir_daemon_refuses_alerts_with_5xx(fleet: dict[str, SpawnedEngine], tmp_path: Path,
                                                       outcome: Record) -> None:
    with router(fleet["hot"].url, fleet["cold"].url) as r, small_tmpfs(tmp_path / "state") as state:
        config = write_config(tmp_path, hot=fleet["hot"].url, cold=fleet["cold"].url, router_url=r.url,
                              interval_s=3600)
        daemon = daemon_for(config, tmp_path).start(ENV)
        try:
            filler = fill(state)
            post = body(alert("f00d01", instance=fleet["cold"].url.removeprefix("http://")))
            refused = daemon.post("/v1/alerts", post)
            assert refused.status_code == 503, refused.text
            reason = refused.json()["error"]
            assert "could not be queued durably" in reason and "No space left on device" in reason, reason
            assert daemon.alive() and daemon.get("/healthz").status_code in (200, 503)
            filler.unlink()
            retried = daemon.post("/v1/alerts", post)  # Alertmanager's retry, once there is room
            assert retried.status_code == 200, retried.text
            assert retried.json()["accepted"] == 1 and retried.json()["duplicates"] == 0  # not taken the first time
            queued = [json.loads(x) for x in (state / "alerts-queue.jsonl").read_text().splitlines() if x.strip()]
            assert [q["key"].split("|")[0] for q in queued if q["op"] == "put"] == ["f00d01"]
        finally:
            daemon.stop()
    outcome("refused", f"full: the webhook answered 503 ({reason[:80]}...), the retry after space came back was "
                       "queued once", lost=0)
