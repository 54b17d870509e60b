"""Lifting the doctor's own emergency length limit early: the decision from one reading, then end to end
against a real router (its clock moved by hand) and a real sim engine, through `doctor diagnose --fix`."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from collectors.types import Signals
from doctor.config import load_config
from doctor.diagnose import main
from doctor.remedy.executor import Remediator
from doctor.remedy.lift import KEEP, already_in_force, counter_increase, judge
from doctor.remedy.model import ActionRecord
from doctor.remedy.setup import remediator
from playbooks.model import Action, Finding
from router.config import RouterConfig
from router.server import router_thread
from sim.testing import ALL_GRAPHED, engine_thread

TOKEN = "lift-test-token"
QUEUE = {"waiting": 5.0, "p95_queue_s": 1.0}


def _record(status: str = "verified", tokens: object = 8192) -> ActionRecord:
    return ActionRecord(action={"action": "length_limit", "target": "router",
                                "params": {"max_tokens": tokens, "expires_in_s": 3600}},
                        engine="cold", playbook="p99_spike", finding_id="f1", status=status)  # type: ignore[arg-type]


def _signals(limit: float | None = 8192.0, idle: float | None = 900.0, **engines: Mapping[str, float]) -> dict:
    engines = engines or {"hot": {"waiting": 0.0, "p95_queue_s": 0.1}, "cold": {"waiting": 0.0}}
    return {name: Signals(name, 5.0, "ok", 200, {"length_limit_tokens": limit, "length_limit_idle_s": idle, **vals})
            for name, vals in engines.items()}


def _judge(rec: ActionRecord, signals: dict, *, cooldown_left_s: float = 0.0):  # type: ignore[no-untyped-def]
    return judge(rec, signals, lift_after_s=600.0, queue_limits=lambda _: QUEUE, cooldown_left_s=cooldown_left_s,
                 now=rec.created_at + 1200.0)


def test_lifts_only_an_idle_doctor_limit_with_no_queue_anywhere() -> None:
    d = _judge(_record(), _signals())
    assert d.lift and not d.done and "900 s" in d.reason
    # Not the doctor's verified limit (still being verified, or a lift record): nothing to do.
    assert not _judge(_record("applied"), _signals()).lift
    assert not _judge(_record(tokens=None), _signals()).lift
    # Refused a request 120 s ago: the long prompts still come.
    d = _judge(_record(), _signals(idle=120.0))
    assert not d.lift and not d.done and "120 s ago" in d.reason
    # Could not be put back at once.
    assert "cooldown" in _judge(_record(), _signals(), cooldown_left_s=30.0).reason
    # Any engine with a queue keeps it; so does an unreadable protected engine.
    d = _judge(_record(), _signals(hot={"waiting": 9.0}, cold={"waiting": 0.0}))
    assert not d.lift and "hot has 9 requests waiting" in d.reason
    d = _judge(_record(), _signals(hot={"waiting": 0.0}, cold={"waiting": 0.0, "p95_queue_s": 2.5}))
    assert not d.lift and "P95 queue time" in d.reason
    d = _judge(_record(), _signals(hot={"waiting": 0.0}))
    assert not d.lift and not d.done and "cold's queue is not readable" in d.reason
    # The router unreadable: keep and look again.
    d = _judge(_record(), _signals(limit=None, idle=None))
    assert not d.lift and not d.done


def test_a_trickle_of_refusals_is_not_a_storm() -> None:
    rec = _record()

    def decide(refused: float | None, *, age: float = 1200.0):  # type: ignore[no-untyped-def]
        return judge(rec, _signals(idle=40.0), lift_after_s=600.0, queue_limits=lambda _: QUEUE,
                     cooldown_left_s=0.0, now=rec.created_at + age, refused_in_window=refused, max_refusals=3.0)

    d = decide(2.0)
    assert d.lift and "refused only 2 requests in the last 600 s (<= 3: a trickle" in d.reason
    d = decide(7.0)
    assert not d.lift and "refused a request 40 s ago; 7 refused in the last 600 s (> 3)" in d.reason
    assert not decide(None).lift  # no history: only a quiet limit is lifted
    assert not decide(0.0, age=300.0).lift  # the window began before the limit was set


def test_counter_increase_over_a_window_from_history() -> None:
    history = [(100.0, 4.0), (400.0, 9.0), (700.0, 10.0)]
    assert counter_increase(history, 12.0, window_s=600.0, now=1000.0) == 3.0  # since the point at t=400
    assert counter_increase(history, 12.0, window_s=950.0, now=1000.0) is None  # no run that long ago
    assert counter_increase(history, 3.0, window_s=600.0, now=1000.0) is None  # the router restarted
    assert counter_increase(history, None, window_s=600.0, now=1000.0) is None


def test_a_limit_past_its_expiry_is_done_whatever_the_router_says() -> None:
    rec = _record()
    d = judge(rec, _signals(), lift_after_s=0.0, queue_limits=lambda _: QUEUE, cooldown_left_s=0.0,
              now=rec.created_at + 3600.0)
    assert d.done and not d.lift and "expired 3600 s after it was set" in d.reason
    d = judge(rec, _signals(), lift_after_s=0.0, queue_limits=lambda _: QUEUE, cooldown_left_s=0.0,
              now=rec.created_at + 3000.0)
    assert d == KEEP  # lifting early is off: kept until it expires


def test_a_limit_gone_or_changed_at_the_router_is_no_longer_the_doctors() -> None:
    d = _judge(_record(), _signals(limit=0.0, idle=None))
    assert d.done and not d.lift and "no longer in force" in d.reason
    d = _judge(_record(), _signals(limit=4096.0))
    assert d.done and not d.lift and "4096" in d.reason and "someone else" in d.reason


def test_a_limit_the_router_already_has_is_not_applied_again() -> None:
    limit = Action("length_limit", "router", {"max_tokens": 8192, "expires_in_s": 3600})
    assert "already refuses prompts over 8192" in already_in_force(limit, _signals(limit=8192.0))
    assert already_in_force(limit, _signals(limit=0.0)) == ""  # none in force
    assert already_in_force(limit, _signals(limit=16000.0)) == ""  # a looser one: tightening changes something
    assert already_in_force(limit, _signals(limit=None, idle=None)) == ""  # unknown: the actuator decides
    scoped = Action("length_limit", "router", {"max_tokens": 8192, "client": "batch"})
    assert already_in_force(scoped, _signals(limit=8192.0)) == ""  # the gauge does not say whom it refuses
    assert already_in_force(Action("set_batch_timeout", "router", {"batch_timeout_ms": 100}), _signals()) == ""


# ---- end to end ------------------------------------------------------------------------------------------


class RouterClock:
    """The router's wall clock, moved by hand (starts now, so the doctor's expiries are in its future)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    router_url: str
    clock: RouterClock
    config: Path
    state: Path

    def policy(self) -> dict:
        return httpx.get(self.router_url + "/router/policy", headers={"Authorization": f"Bearer {TOKEN}"}).json()

    def put(self, **fields: object) -> None:
        doc = self.policy()
        for key in ("status", "updated_at"):
            doc.pop(key)
        doc.update(fields)
        r = httpx.put(self.router_url + "/router/policy", json=doc, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, r.text


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("ROUTER_POLICY_TOKEN", TOKEN)
    clock = RouterClock()
    with engine_thread(["m", *ALL_GRAPHED, "--time-scale", "0.1", "--max-model-len", "16384"]) as hot:
        cfg = RouterConfig(hot=[hot.url], cold=[], policy_file="", port=0, route_threshold_tokens=16384)
        with router_thread(cfg, token=TOKEN, clock=clock) as rt:
            config = tmp_path / "doctor.toml"
            config.write_text(
                f'[doctor]\nstate_dir = "{tmp_path / "state"}"\nmode = "auto"\nsample_s = "0.2s"\n'
                'cooldown_s = 0\nlength_limit_lift_after_s = "10m"\n\n'
                f'[router]\nurl = "{rt.url}"\n\n'
                f'[[engines]]\nname = "hot"\nurl = "{hot.url}"\nmax_model_len = 16384\n')
            yield World(rt.url, clock, config, tmp_path / "state")


def _doctor_sets_the_limit(w: World) -> Remediator:
    """The doctor's own limit, applied and verified (the engine's queue went down)."""
    rem = remediator(load_config(w.config), w.state, environ={"ROUTER_POLICY_TOKEN": TOKEN})
    finding = Finding("p99_spike", "hot", "critical", 0.9, "P99 TTFT 40 s", (),
                      (Action("length_limit", "router", {"max_tokens": 8192, "expires_in_s": 3600},
                              inverse={"max_tokens": None}),), "", time.time() - 300)
    [rec] = asyncio.run(rem.fix([finding], {"hot": Signals("hot", 5.0, "ok", 200, {"waiting": 30.0})}))

    async def reread() -> dict[str, Signals]:
        return {"hot": Signals("hot", 5.0, "ok", 200, {"waiting": 0.0})}

    asyncio.run(rem.verify([rec], reread, wait_s=0))
    assert rec.status == "verified", rec
    assert w.policy()["length_limit_tokens"] == 8192
    return rem


def _diagnose(w: World) -> dict:
    out, err = io.StringIO(), io.StringIO()
    main(["--config", str(w.config), "--format", "json", "--fix", "--verify-wait", "0"], out=out, err=err)
    assert out.getvalue(), err.getvalue()
    return dict(json.loads(out.getvalue()))


def test_diagnose_fix_lifts_the_doctors_limit_once_it_has_refused_nothing_for_long(world: World) -> None:
    _doctor_sets_the_limit(world)
    world.clock.now += 300
    report = _diagnose(world)
    assert world.policy()["length_limit_tokens"] == 8192 and report["actions"] == []  # idle 300 s < 10 min
    world.clock.now += 400
    # A long document arrives and is refused: the storm is not over, idle starts again.
    refused = httpx.post(world.router_url + "/v1/completions", json={"prompt": "tok " * 9000, "max_tokens": 2},
                         timeout=30)
    assert refused.status_code == 413
    world.clock.now += 300
    _diagnose(world)
    assert world.policy()["length_limit_tokens"] == 8192
    world.clock.now += 301
    report = _diagnose(world)
    [lifted] = report["actions"]
    assert lifted["action"] == "length_limit" and lifted["status"] == "expired", lifted
    assert lifted["reason"].startswith("lifted early: refused nothing for 601 s")
    policy = world.policy()
    assert policy["length_limit_tokens"] is None and policy["length_limit_expires_at"] is None
    events = [json.loads(line) for line in (world.state / "audit.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events][-2:] == ["lifting", "expired"]
    assert TOKEN not in (world.state / "audit.jsonl").read_text()
    assert _diagnose(world)["actions"] == []  # ended: not looked at again


def test_a_limit_a_person_changed_is_left_alone(world: World) -> None:
    _doctor_sets_the_limit(world)
    world.put(length_limit_tokens=4096)
    world.clock.now += 700
    [ended] = _diagnose(world)["actions"]
    assert ended["status"] == "expired" and "someone else" in ended["reason"]
    assert world.policy()["length_limit_tokens"] == 4096


def test_observe_mode_and_the_kill_switch_never_lift(world: World) -> None:
    _doctor_sets_the_limit(world)
    world.clock.now += 700
    (world.state / "kill-switch").write_text("")
    assert _diagnose(world)["actions"] == [] and world.policy()["length_limit_tokens"] == 8192
    (world.state / "kill-switch").unlink()
    world.config.write_text(world.config.read_text().replace('mode = "auto"', 'mode = "observe"'))
    _diagnose(world)
    assert world.policy()["length_limit_tokens"] == 8192


def test_a_limit_another_doctor_already_lifted_is_left_as_that_doctor_recorded_it(world: World) -> None:
    rem = _doctor_sets_the_limit(world)
    world.clock.now += 700
    other = remediator(load_config(world.config), world.state, environ={"ROUTER_POLICY_TOKEN": TOKEN})
    stale = other.store.recent(5)  # read before the first doctor acts
    signals = {"hot": Signals("hot", 5.0, "ok", 200, {"waiting": 0.0, "length_limit_tokens": 8192.0,
                                                       "length_limit_idle_s": 700.0})}
    [first] = asyncio.run(rem.lift_idle_limits(signals))
    assert first.reason.startswith("lifted early") and world.policy()["length_limit_tokens"] is None
    [rec] = [r for r in stale if r.kind == "length_limit"]
    assert rec.status == "verified"
    assert asyncio.run(other._lift(rec, 8192, "again")) is False
    assert other.store.get(rec.id).reason.startswith("lifted early")


def test_an_older_record_of_the_same_limit_ends_with_the_lift(world: World) -> None:
    _doctor_sets_the_limit(world)
    rem = _doctor_sets_the_limit(world)  # applied again by a run that could not read the router
    world.clock.now += 700
    signals = {"hot": Signals("hot", 5.0, "ok", 200, {"waiting": 0.0, "length_limit_tokens": 8192.0,
                                                       "length_limit_idle_s": 700.0})}
    newer, older = asyncio.run(rem.lift_idle_limits(signals))
    assert newer.reason.startswith("lifted early: refused nothing")
    assert older.reason == f"lifted early with {newer.id}" and older.status == "expired"
    assert world.policy()["length_limit_tokens"] is None


def test_the_next_run_reports_its_verdict_on_an_earlier_runs_action(world: World) -> None:
    rem = remediator(load_config(world.config), world.state, environ={"ROUTER_POLICY_TOKEN": TOKEN})
    finding = Finding("p99_spike", "hot", "critical", 0.9, "P99 TTFT 40 s", (),
                      (Action("length_limit", "router", {"max_tokens": 8192, "expires_in_s": 3600}),), "",
                      time.time() - 300)
    [rec] = asyncio.run(rem.fix([finding], {"hot": Signals("hot", 5.0, "ok", 200, {"waiting": 30.0})}))
    assert rec.status == "applied"  # that run did not wait to verify
    [judged] = _diagnose(world)["actions"]  # the idle engine's queue is empty now: 30 -> 0
    assert (judged["id"], judged["status"]) == (rec.id, "verified"), judged
    assert _diagnose(world)["actions"] == []  # reported once


def test_the_text_report_says_whether_a_limit_is_in_force(world: World) -> None:
    def text() -> str:
        out, err = io.StringIO(), io.StringIO()
        main(["--config", str(world.config), "--format", "text"], out=out, err=err)
        return out.getvalue()

    assert "router: no emergency length limit in force" in text()
    _doctor_sets_the_limit(world)
    world.clock.now += 90
    assert "router: emergency length limit in force: prompts over 8192 tokens get 413, refused nothing for 90 s" \
        in text()


def test_diagnose_fix_lifts_a_limit_that_only_refuses_a_trickle(world: World) -> None:
    from collectors.history import SignalHistory

    rem = _doctor_sets_the_limit(world)
    [rec] = [r for r in rem.store.recent(5) if r.kind == "length_limit"]
    rec.created_at -= 1200  # set 20 minutes ago
    rem.store.put(rec)
    # Long documents still arrive now and then, so the limit is never idle for 10 minutes ...
    for _ in range(2):
        r = httpx.post(world.router_url + "/v1/completions", json={"prompt": "tok " * 9000, "max_tokens": 2},
                       timeout=30)
        assert r.status_code == 413
    # ... but a cron run 11 minutes ago (the limit then already in force for a while) saw the counter at 0.
    SignalHistory(world.state / "history.jsonl").append("hot", time.time() - 660, {"length_limit_refusals_total": 0.0})
    world.clock.now += 30
    [lifted] = _diagnose(world)["actions"]
    assert lifted["status"] == "expired", lifted
    assert "refused only 2 requests in the last 600 s (<= 3: a trickle, not a storm)" in lifted["reason"]
    assert world.policy()["length_limit_tokens"] is None
