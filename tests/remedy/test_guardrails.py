"""Guardrails: mode, kill switch, maintenance, bounds, lock, cooldown, budget and fleet breaker.

The concurrency tests fork real processes that race on the same state dir; each child reports by its
exit code (0: got the slot, 1: refused, 2: something else went wrong).
"""

from __future__ import annotations

import multiprocessing
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from doctor.config import DoctorConfig, config_from_dict
from doctor.remedy.guardrails import Guardrails, TargetBusy, breaker_limit, lock_name
from doctor.remedy.journal import Journal
from doctor.remedy.model import Refused
from doctor.remedy.planner import Planned, plan
from playbooks.model import Action, Finding

CTX = multiprocessing.get_context("fork")
T0 = datetime(2025, 3, 5, 12, 0, tzinfo=UTC).timestamp()  # a Wednesday, noon UTC


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def config(**doctor: Any) -> DoctorConfig:
    extra = doctor.pop("extra", {})
    engines = doctor.pop("engines", ["hot", "cold"])
    doc: dict[str, Any] = {
        "doctor": {"mode": "auto", "cooldown_s": 900, "hourly_action_budget": 6, "fleet_breaker_ratio": 0.5,
                   **doctor},
        "engines": [{"name": n, "url": f"http://127.0.0.1:{8000 + i}", "max_model_len": 16384, "gpus": [i]}
                    for i, n in enumerate(engines)],
        **extra,
    }
    return config_from_dict(doc)


def planned(action: Action, playbook: str = "p99_spike", engine: str = "hot") -> Planned:
    f = Finding(playbook=playbook, engine=engine, severity="warning", confidence=0.8, summary="x", evidence=(),
                remedies=(action,), runbook="", onset=1.0)
    (p,) = plan([f])
    return p


def relaunch(engine: str = "hot", **params: Any) -> Planned:
    return planned(Action("relaunch", engine, params or {"max_num_seqs": 64}), "kv_pressure", engine)


def batch_timeout(ms: Any) -> Planned:
    return planned(Action("set_batch_timeout", "router", {"engine": "hot", "batch_timeout_ms": ms}), "throughput_drop")


def guard(tmp_path: Path, cfg: DoctorConfig | None = None, clock: Clock | None = None, **kw: Any) -> Guardrails:
    return Guardrails(tmp_path / "state", cfg or config(), clock or Clock(), **kw)


# -- mode

def test_mode_global_and_per_playbook(tmp_path: Path) -> None:
    cfg = config(mode="dry-run", extra={"playbooks": {"kv_pressure": {"mode": "approve"}}})
    g = guard(tmp_path, cfg)
    d = g.check(relaunch(), engines_total=2)
    assert d.mode == "approve" and d.allowed and not d.acts
    d = g.check(batch_timeout(100), engines_total=2)
    assert d.mode == "dry-run" and d.allowed
    assert guard(tmp_path, config(mode="auto")).check(batch_timeout(100), engines_total=2).acts


# -- kill switch, maintenance

def test_kill_switch_file_refuses(tmp_path: Path) -> None:
    g = guard(tmp_path)
    assert g.check(relaunch(), engines_total=2).allowed
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "kill-switch").write_text("")
    d = g.check(relaunch(), engines_total=2)
    assert not d.allowed and d.guard == "kill_switch" and "kill-switch" in d.reason
    # a configured kill switch path
    other = tmp_path / "stop-doctor"
    g2 = guard(tmp_path / "b", config(kill_switch_file=str(other)))
    assert g2.check(relaunch(), engines_total=2).allowed
    other.write_text("")
    assert g2.check(relaunch(), engines_total=2).guard == "kill_switch"


def test_maintenance_window_refuses(tmp_path: Path) -> None:
    cfg = config(extra={"maintenance": [{"start": "11:30", "end": "13:00", "days": ["wed"], "reason": "upgrade"}]})
    clock = Clock()
    g = guard(tmp_path, cfg, clock)
    d = g.check(relaunch(), engines_total=2)
    assert not d.allowed and d.guard == "maintenance" and "upgrade" in d.reason
    clock.t = T0 + 2 * 3600
    assert g.check(relaunch(), engines_total=2).allowed


def test_escalations_are_only_subject_to_the_mode(tmp_path: Path) -> None:
    g = guard(tmp_path, config(hourly_action_budget=0))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "kill-switch").write_text("")
    p = planned(Action("escalate", "hot", {"reason": "x"}), "error_rate")
    d = g.check(p, engines_total=2)
    assert d.allowed and d.mode == "auto"
    g.record_applied(p, engines_total=2, record_id="r1")  # records nothing, refuses nothing


# -- bounds

@pytest.mark.parametrize(("ms", "ok"), [(50, True), (200, True), (120, True), (49, False), (201, False),
                                        ("raise", False), (None, False), (True, False)])
def test_batch_timeout_bounds(tmp_path: Path, ms: Any, ok: bool) -> None:
    d = guard(tmp_path).check(batch_timeout(ms), engines_total=2)
    assert d.allowed is ok
    if not ok:
        assert d.guard == "bounds" and "batch_timeout_ms" in d.reason


def test_length_limit_within_max_model_len_or_configured_bound(tmp_path: Path) -> None:
    def limit(n: Any) -> Planned:
        return planned(Action("length_limit", "router", {"max_tokens": n, "expires_in_s": 3600}))

    g = guard(tmp_path)
    assert g.check(limit(16384), engines_total=2).allowed
    d = g.check(limit(16385), engines_total=2)
    assert not d.allowed and "max_model_len" in d.reason
    assert not g.check(limit(0), engines_total=2).allowed
    bounded = guard(tmp_path, config(extra={"bounds": {"length_limit_max_tokens": 4096}}))
    d = bounded.check(limit(8192), engines_total=2)
    assert not d.allowed and "length_limit_max_tokens" in d.reason
    bad_expiry = planned(Action("length_limit", "router", {"max_tokens": 4096, "expires_in_s": -1}))
    assert "expires_in_s" in g.check(bad_expiry, engines_total=2).reason


def test_max_in_flight_at_least_one(tmp_path: Path) -> None:
    g = guard(tmp_path)

    def mif(n: Any) -> Planned:
        return planned(Action("set_max_in_flight", "router", {"engine": "hot", "max_in_flight": n}), "queue_pressure")

    assert g.check(mif(1), engines_total=2).allowed
    assert g.check(mif(0), engines_total=2).guard == "bounds"
    assert g.check(mif("raise"), engines_total=2).guard == "bounds"


def test_unknown_engines_are_refused(tmp_path: Path) -> None:
    g = guard(tmp_path)
    d = g.check(relaunch("warm"), engines_total=2)
    assert d.guard == "unknown_engine" and "'warm'" in d.reason and "hot, cold" in d.reason
    d = g.check(planned(Action("stop_routing", "router", {"engine": "nope"}), "gpu_fault"), engines_total=2)
    assert d.guard == "unknown_engine"


def test_relaunch_parameters_must_be_concrete(tmp_path: Path) -> None:
    g = guard(tmp_path)
    assert g.check(relaunch(max_num_seqs="lower"), engines_total=2).guard == "bounds"
    assert g.check(relaunch(gpu_memory_utilization=1.5), engines_total=2).guard == "bounds"
    assert g.check(relaunch(gpu_memory_utilization=0.8), engines_total=2).allowed
    assert g.check(relaunch(reason="engine down"), engines_total=2).allowed


def test_tensor_parallel_up_to_free_gpus_or_bound(tmp_path: Path) -> None:
    def tp(n: int) -> Planned:
        return planned(Action("scale_out", "hot", {"tensor_parallel_size": n}), "capacity_scale_out")

    g = guard(tmp_path)
    d = g.check(tp(2), engines_total=2)  # free GPUs unknown, no bound: never assumed
    assert not d.allowed and "never assumed" in d.reason
    assert g.check(tp(2), engines_total=2, free_gpus=1).allowed  # its own GPU + 1 free
    d = g.check(tp(4), engines_total=2, free_gpus=1)
    assert not d.allowed and "1 are free" in d.reason
    capped = guard(tmp_path, config(extra={"bounds": {"tensor_parallel_max": 2}}))
    assert capped.check(tp(2), engines_total=2).allowed
    assert "tensor_parallel_max" in capped.check(tp(4), engines_total=2, free_gpus=8).reason
    replica = planned(Action("scale_out", "hot", {"add_replicas": 1}), "queue_pressure")
    assert not g.check(replica, engines_total=2).allowed
    assert g.check(replica, engines_total=2, free_gpus=1).allowed
    assert not g.check(replica, engines_total=2, free_gpus=0).allowed


# -- cooldown, budget, breaker (single process)

def test_cooldown_keyed_on_kind_and_target(tmp_path: Path) -> None:
    clock = Clock()
    g = guard(tmp_path, clock=clock)
    g.record_applied(relaunch("hot"), engines_total=2)
    d = g.check(relaunch("hot"), engines_total=2)
    assert d.guard == "cooldown" and "relaunch on hot" in d.reason
    assert g.check(relaunch("cold"), engines_total=2).allowed  # another target
    assert g.check(planned(Action("defragment", "hot", {}), "memory_fragmentation"), engines_total=2).allowed
    with pytest.raises(Refused, match="cooldown"):
        g.record_applied(relaunch("hot"), engines_total=2)
    clock.t += 901
    assert g.check(relaunch("hot"), engines_total=2).allowed


def test_hourly_budget_is_a_sliding_hour(tmp_path: Path) -> None:
    clock = Clock()
    g = guard(tmp_path, config(hourly_action_budget=2, cooldown_s=0), clock)
    g.record_applied(relaunch("hot"))
    clock.t += 1000
    g.record_applied(relaunch("cold"))
    assert g.budget_left() == 0
    d = g.check(relaunch("hot"), engines_total=2)
    assert d.guard == "budget" and "2 of 2" in d.reason
    clock.t += 2601  # the first one is now more than an hour old
    assert g.check(relaunch("hot"), engines_total=2).allowed and g.budget_left() == 1


def test_fleet_breaker_counts_changes_in_flight(tmp_path: Path) -> None:
    clock = Clock()
    g = guard(tmp_path, config(cooldown_s=0, engines=["a", "b", "c", "d"]), clock, stale_after_s=600)
    g.record_applied(relaunch("a"), engines_total=4, record_id="r-a")
    g.record_applied(relaunch("b"), engines_total=4, record_id="r-b")
    assert g.in_progress() == {"a", "b"}
    d = g.check(relaunch("c"), engines_total=4)
    assert d.guard == "breaker" and "2 of 4" in d.reason
    assert g.check(relaunch("a"), engines_total=4).allowed  # already changing: not one more engine
    # router-wide actions change no engine
    assert g.check(planned(Action("length_limit", "router", {"max_tokens": 4096})), engines_total=4).allowed
    g.release("r-a")
    assert g.check(relaunch("c"), engines_total=4).allowed
    clock.t += 601  # a change that never ended stops counting (the journal reconciles it)
    assert g.in_progress() == set()


def test_fleet_breaker_reads_the_journal(tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    g = guard(tmp_path, config(cooldown_s=0, engines=["a", "b"]), journal=journal)
    rec = relaunch("a").record()
    journal.begin(rec)  # e.g. begun by a doctor that was killed before recording anything else
    assert g.in_progress() == {"a"}
    assert g.check(relaunch("b"), engines_total=2).guard == "breaker"
    journal.finish(rec.id, "rolled_back")
    assert g.check(relaunch("b"), engines_total=2).allowed
    # a finished record's in-flight mark no longer counts even if release() was missed
    rec2 = relaunch("b").record()
    journal.begin(rec2)
    g.record_applied(relaunch("b"), engines_total=2, record_id=rec2.id)
    journal.finish(rec2.id, "verified")
    assert g.in_progress() == set()


def test_breaker_limit() -> None:
    assert breaker_limit(0.5, 2) == 1 and breaker_limit(0.5, 1) == 1 and breaker_limit(0.5, 4) == 2
    assert breaker_limit(0.0, 4) == 0 and breaker_limit(0.3, 10) == 3 and breaker_limit(1.0, 3) == 3


# -- locks

def test_lock_names() -> None:
    assert lock_name("hot") == "engine-hot" and lock_name("router:hot") == "engine-hot"
    assert lock_name("router") == "router"
    with pytest.raises(ValueError, match="cannot lock"):
        lock_name("../etc")


def test_acquire_is_exclusive_and_released(tmp_path: Path) -> None:
    g = guard(tmp_path)
    other = guard(tmp_path)
    with g.acquire("hot"):
        with pytest.raises(TargetBusy, match="engine 'hot' is being changed"), other.acquire("router:hot"):
            pass  # the same engine through the router
        with other.acquire("cold"), other.acquire("router"):
            pass
    with other.acquire("hot"):
        pass


def test_exception_in_body_is_not_reported_as_busy(tmp_path: Path) -> None:
    g = guard(tmp_path)
    with pytest.raises(RuntimeError, match="boom"), g.acquire("hot"):
        raise RuntimeError("boom")
    with g.acquire("hot"):
        pass


# -- concurrent callers (forked processes racing on one state dir)

def _race(n: int, body: Any) -> list[int]:
    start = CTX.Barrier(n)
    done = CTX.Barrier(n)

    def child(i: int) -> None:
        code = 2
        try:
            start.wait(timeout=30)
            code = body(i, done)
        except Refused:
            code = 1
        except TargetBusy:
            code = 1
        finally:
            os._exit(code)

    procs = [CTX.Process(target=child, args=(i,)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode is not None for p in procs), "a child hung"
    return [int(p.exitcode or 0) for p in procs]


def test_concurrent_engine_lock_one_winner(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def body(i: int, done: Any) -> int:
        g = Guardrails(state, config(), Clock())
        try:
            with g.acquire("router:hot" if i % 2 else "hot"):
                done.wait(timeout=30)  # hold it until everyone has tried
                return 0
        except TargetBusy:
            done.wait(timeout=30)
            return 1

    codes = _race(6, body)
    assert sorted(codes) == [0, 1, 1, 1, 1, 1]


def test_concurrent_budget_exactly_the_allowed_number(tmp_path: Path) -> None:
    state = tmp_path / "state"
    engines = [f"e{i}" for i in range(8)]

    def body(i: int, done: Any) -> int:
        g = Guardrails(state, config(hourly_action_budget=3, cooldown_s=0, engines=engines), Clock())
        g.record_applied(relaunch(f"e{i}"), engines_total=8)
        return 0

    codes = _race(8, body)
    assert codes.count(0) == 3 and codes.count(1) == 5
    g = Guardrails(state, config(hourly_action_budget=3, engines=engines), Clock())
    assert g.budget_left() == 0


def test_concurrent_cooldown_one_winner(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def body(i: int, done: Any) -> int:
        g = Guardrails(state, config(hourly_action_budget=100), Clock())
        g.record_applied(batch_timeout(100), engines_total=2)
        return 0

    codes = _race(6, body)
    assert codes.count(0) == 1 and codes.count(1) == 5


def test_concurrent_fleet_breaker(tmp_path: Path) -> None:
    state = tmp_path / "state"
    engines = [f"e{i}" for i in range(8)]

    def body(i: int, done: Any) -> int:
        g = Guardrails(state, config(hourly_action_budget=100, cooldown_s=0, fleet_breaker_ratio=0.25,
                                     engines=engines), Clock())
        p = relaunch(f"e{i}")
        with g.acquire(p.target):
            g.record_applied(p, engines_total=8, record_id=f"r{i}")
        return 0

    codes = _race(8, body)
    assert codes.count(0) == 2 and codes.count(1) == 6
    g = Guardrails(state, config(engines=engines), Clock())
    assert len(g.in_progress()) == 2
