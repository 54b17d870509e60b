"""The cycle's I/O is substitutable through the plan: HTTP transports (async and sync), the wait, the clock."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from doctor.cycle import CycleResult, run_cycle
from doctor.engines import EngineRef
from doctor.plan import Plan
from doctor.reading import BASELINE_SIGNAL
from sim.harness import Harness
from sim.scenarios import SCENARIOS


def _harness(start: float | None = None) -> Harness:
    h = Harness(seed=0) if start is None else Harness(seed=0, start=start)
    sc = SCENARIOS["healthy"]
    h.add_engine("hot", sc.argv_for("hot", 0), env=dict(sc.engine("hot").env))
    return h


def _plan(h: Harness, tmp_path: Path, seen: list[tuple[str, float]], slept: list[float]) -> Plan:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((f"{request.url.host}{request.url.path}", h.now))
        if request.url.host == "dcgm.test":
            return httpx.Response(200, text=h.gpu_text("hot"))
        if request.url.path == "/metrics":
            return httpx.Response(200, text=h.metrics_text("hot"))
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": h.engines["hot"].core.profile.version})
        if request.url.path == "/health":
            return httpx.Response(h.health("hot"))
        return httpx.Response(404)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        h.run_until(h.now + seconds)

    transport = httpx.MockTransport(handle)
    ref = EngineRef("hot", "hot", "http://hot.test", dcgm="http://dcgm.test/metrics")
    return Plan(engines=(ref,), state_dir=tmp_path, sample_s=5.0, transport=transport, sync_transport=transport,
                sleep=sleep)


def test_a_cycle_reads_through_the_plans_transports_and_waits_on_its_sleep(tmp_path: Path) -> None:
    h = _harness()
    h.run_until(h.start + 100)
    seen: list[tuple[str, float]] = []
    slept: list[float] = []
    result = asyncio.run(run_cycle(_plan(h, tmp_path, seen, slept), clock=lambda: h.now))
    assert isinstance(result, CycleResult)
    assert slept == [5.0]
    metrics = [t for what, t in seen if what == "hot.test/metrics"]
    assert metrics == [h.start + 100, h.start + 105]  # two reads, sample_s apart in virtual time
    assert any(what == "dcgm.test/metrics" for what, _ in seen)  # DcgmSource through the sync transport
    assert result.report["generated_at"].startswith("2026-")  # the harness's clock (EPOCH is in 2026)
    assert result.report["status"] == "ok" and result.findings == [] and result.pending == []
    assert set(result.signals) == {"hot"} and result.signals["hot"].values.get("dram_utilization") is not None
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    history = [(t, values) for t, engine, values in map(json.loads, lines) if engine == "hot"]
    assert {t for t, _ in history} == {h.start + 105}  # the framebuffer baseline too is stamped by the clock
    assert any(BASELINE_SIGNAL in values for _, values in history)
    assert (tmp_path / "snapshots.jsonl").exists()


def test_history_is_judged_on_the_plans_clock(tmp_path: Path) -> None:
    """A second cycle in virtual time sees the first one's history (SignalHistory reads the cycle's clock, not
    the wall clock: from 2001 the wall clock's six hours would hold none of it)."""
    h = _harness(start=1_000_000_000.0)
    seen: list[tuple[str, float]] = []
    plan = _plan(h, tmp_path, seen, [])
    h.run_until(h.start + 60)
    asyncio.run(run_cycle(plan, clock=lambda: h.now))
    h.run_until(h.start + 120)
    result = asyncio.run(run_cycle(plan, clock=lambda: h.now))
    assert result.signals["hot"].values.get("memory_growth_ratio") is not None  # baseline from the first cycle


def test_a_long_lived_caller_reads_each_engine_once_while_its_previous_read_is_fresh(tmp_path: Path) -> None:
    """With a ReadMemory (the daemon's), a cycle whose previous read is at most `fresh_s` old reads once and opens
    its window on the kept snapshots; /version is asked again only after identity_ttl_s or a failed read; a gap
    longer than `fresh_s` falls back to two reads."""
    import dataclasses

    from doctor.read_memory import ReadMemory

    h = _harness()
    h.run_until(h.start + 100)
    seen: list[tuple[str, float]] = []
    slept: list[float] = []
    plan = dataclasses.replace(_plan(h, tmp_path, seen, slept), memory=ReadMemory(fresh_s=3.0, identity_ttl_s=10.0))

    def cycle() -> tuple[list[str], CycleResult]:
        seen.clear()
        result = asyncio.run(run_cycle(plan, clock=lambda: h.now))
        return [what for what, _ in seen if what.startswith("hot.test")], result

    first, _ = cycle()  # nothing kept yet: two reads, sample_s apart
    assert first.count("hot.test/metrics") == 2 and slept == [5.0]
    for _ in range(4):
        h.run_until(h.now + 1.0)
        reads, result = cycle()
        assert reads.count("hot.test/metrics") == 1 and slept == [5.0], reads  # one read, no wait
        assert reads.count("hot.test/version") == 0  # the identity is remembered...
        assert reads.count("hot.test/health") == 0  # ...and the last /health 200, for 5 s
        assert result.signals["hot"].values.get("qps") is not None  # ...and the window opens on the kept reads
        assert result.signals["hot"].window_s >= 5.0
        assert result.report["engines"][0]["version"]  # the remembered /version still names the profile
    h.run_until(h.now + 10.0)  # more than fresh_s since the last read: two reads again, identity asked again
    reads, _ = cycle()
    assert reads.count("hot.test/metrics") == 2 and reads.count("hot.test/version") == 1
    assert reads.count("hot.test/health") == 2


def test_a_failed_metrics_read_asks_health_at_once(tmp_path: Path) -> None:
    """The remembered /health 200 is not trusted when /metrics fails: /health is asked in the same cycle, so an
    engine that went down is reported down by that cycle."""
    import dataclasses

    from doctor.read_memory import ReadMemory

    h = _harness()
    h.run_until(h.start + 100)
    seen: list[tuple[str, float]] = []
    plan = _plan(h, tmp_path, seen, [])
    down = [False]
    inner = plan.transport

    async def handle(request: httpx.Request) -> httpx.Response:
        if down[0]:
            return httpx.Response(503)
        assert inner is not None
        return await inner.handle_async_request(request)

    plan = dataclasses.replace(plan, transport=httpx.MockTransport(handle), memory=ReadMemory(fresh_s=3.0))
    asyncio.run(run_cycle(plan, clock=lambda: h.now))
    h.run_until(h.now + 1.0)
    down[0] = True
    seen.clear()
    result = asyncio.run(run_cycle(plan, clock=lambda: h.now))
    assert result.signals["hot"].health == "unhealthy" and result.signals["hot"].health_status == 503
    assert any(f.playbook == "engine_down" for f in [*result.findings, *result.pending])


def test_two_doctors_judging_at_once_both_keep_their_for_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cron and the daemon on one state directory: the playbooks' state is read, updated and written under one
    lock, so neither writes back what it read before the other's update."""
    import threading

    import doctor.pipeline

    real = doctor.pipeline.run_playbooks
    first_in, release = threading.Event(), threading.Event()

    def judged(views: Any, state: dict[str, Any], **kw: Any) -> Any:
        me = threading.current_thread().name
        state[me] = {"seen": True}
        if me == "first":
            first_in.set()
            release.wait(10)  # the second cycle arrives while the first is judging
        return real(views, state, **kw)

    monkeypatch.setattr(doctor.pipeline, "run_playbooks", judged)

    def one(name: str) -> None:
        h = _harness()
        h.run_until(h.start + 100)
        asyncio.run(run_cycle(_plan(h, tmp_path, [], []), clock=lambda: h.now))

    first = threading.Thread(target=one, args=("first",), name="first")
    second = threading.Thread(target=one, args=("second",), name="second")
    first.start()
    assert first_in.wait(30)
    second.start()
    second.join(0.5)  # it waits for the lock (or, without one, would have written its state by now)
    release.set()
    first.join(30)
    second.join(30)
    state = json.loads((tmp_path / "playbooks.json").read_text())
    assert {"first", "second"} <= set(state)
