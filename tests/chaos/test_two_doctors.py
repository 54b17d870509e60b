"""Chaos: two doctors racing for the same engine. Three cron runs of `doctor diagnose --fix` started at once, then
cron runs beside a `doctor serve` daemon acting on the same deployment: exactly one process changes the router, once;
every other run is refused with its reason (another run holds the lock, the target is busy, the cooldown, the limit
already in force). All real processes over one state directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.chaos.conftest import Record
from tests.chaos.procs import Done, finish, start_diagnose
from tests.serve.stack import (
    ROUTER_TOKEN,
    audit,
    daemon_for,
    engines,
    load,
    policy,
    router,
    seed_for_state,
    wait_for,
    write_config,
)
from trials.live import SpawnedEngine

pytestmark = pytest.mark.timeout(300)
ENV = {"ROUTER_POLICY_TOKEN": ROUTER_TOKEN}
REFUSALS = ("cooldown", "busy", "already", "in force", "another run is in progress")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SpawnedEngine]]:
    with engines(["hot", "cold"], tmp_path_factory.mktemp("fleet")) as eng:
        storm = load(eng["hot"].url)  # long_prompt_share on hot: an emergency length limit at the router
        try:
            yield eng
        finally:
            storm.stop()


def _limit_changes(router_url: str) -> list[dict]:
    doc = httpx.get(router_url + "/router/policy/history", headers={"Authorization": f"Bearer {ROUTER_TOKEN}"},
                    timeout=5, trust_env=False).json()
    return [h for h in doc["history"] if any(c.startswith("length_limit_tokens:") for c in h.get("changes", []))]


def _begun(state: Path) -> list[dict]:
    return [e for e in audit(state) if e["event"] == "begin"]


def _why_not(run: Done) -> str:
    """What a run that did not act said: its refusal's reason, or the lock message."""
    reasons = [a["reason"] for a in run.actions() if a["action"] == "length_limit" and a["status"] == "refused"]
    if reasons:
        return reasons[0]
    if run.code == 3:
        return run.err.strip()
    # a run after the limit was set whose window did not show the condition: it planned nothing
    assert not [a for a in run.actions() if a["action"] == "length_limit"], run
    return "already: nothing planned"


def test_cron_runs_racing_act_exactly_once(fleet: dict[str, SpawnedEngine], tmp_path: Path, outcome: Record) -> None:
    state = tmp_path / "state"
    with router(fleet["hot"].url, fleet["cold"].url) as r:
        config = write_config(tmp_path, hot=fleet["hot"].url, cold=fleet["cold"].url, router_url=r.url,
                              doctor_extra='sample_s = "2s"')
        seed_for_state(state, "long_prompt_share|hot", held_s=100)
        procs = [start_diagnose(["--config", str(config), "--fix", "--verify-wait", "0"], env=ENV) for _ in range(3)]
        runs = [finish(p) for p in procs]
        assert all("Traceback" not in run.err for run in runs), [run.err for run in runs]
        acted = [run for run in runs if any(a["status"] == "applied" for a in run.actions())]
        assert len(acted) == 1, runs
        assert len(_begun(state)) == 1
        assert policy(r.url)["length_limit_tokens"] == 8192
        assert len(_limit_changes(r.url)) == 1  # the router changed once
        others = [_why_not(run) for run in runs if run is not acted[0]]
        assert all(any(word in why for word in REFUSALS) for why in others), others
    outcome("recovered", f"3 cron runs at once: 1 applied the limit, the others: {'; '.join(o[:60] for o in others)}",
            lost=0)


def test_cron_beside_the_daemon_acts_exactly_once(fleet: dict[str, SpawnedEngine], tmp_path: Path,
                                                  outcome: Record) -> None:
    state = tmp_path / "state"
    with router(fleet["hot"].url, fleet["cold"].url) as r:
        config = write_config(tmp_path, hot=fleet["hot"].url, cold=fleet["cold"].url, router_url=r.url,
                              interval_s=1.0, doctor_extra='sample_s = "2s"')
        seed_for_state(state, "long_prompt_share|hot", held_s=100)
        daemon = daemon_for(config, tmp_path).start(ENV, ready=False)
        try:
            procs = [start_diagnose(["--config", str(config), "--fix", "--verify-wait", "0"], env=ENV)
                     for _ in range(2)]  # cron fires while the daemon comes up and runs its first cycles
            runs = [finish(p) for p in procs]
            wait_for("the daemon's cycles", lambda: daemon.alive() and daemon.get("/readyz").status_code == 200,
                     timeout_s=90)
            wait_for("three daemon cycles after the cron runs", lambda: _cycles(daemon.get("/metrics").text) >= 3,
                     timeout_s=90)
            assert all("Traceback" not in run.err for run in runs), [run.err for run in runs]
            begun = _begun(state)
            assert len(begun) == 1, begun  # one process journaled and applied the limit, once
            assert policy(r.url)["length_limit_tokens"] == 8192
            assert len(_limit_changes(r.url)) == 1
            by = "the daemon" if begun[0]["trigger"] == "serve" else "a cron run"
            # Every other attempt was refused with its reason (there may be none: while a change is in progress the
            # engine's findings wait, and a run that planned nothing did not act).
            refused = [e for e in audit(state) if e["event"] == "refused" and e["action"] == "length_limit"]
            assert all(any(w in e["reason"] for w in REFUSALS) for e in refused), refused
            locked = [run for run in runs if run.code == 3]
            assert all("another run is in progress" in run.err for run in locked), locked
        finally:
            daemon.stop()
    why = f" ({refused[0]['reason'][:60]}...)" if refused else ""
    outcome("recovered", f"2 cron runs beside the daemon: {by} applied the limit once; {len(locked)} cron run "
                         f"found the lock held, {len(refused)} other attempt(s) refused{why}", lost=0)


def _cycles(metrics: str) -> float:
    """The daemon's cycles so far (its own /metrics)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("doctor_cycles_total{"))
