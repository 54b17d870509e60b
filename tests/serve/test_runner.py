"""The daemon's loops with the cycle substituted (its I/O: what a cycle returns and how long it takes): cycles
never overlap and a tick that comes while one runs is skipped, not queued; an alert wakes a cycle at once; an
alert that arrives during a cycle is judged by the next one; pending waits, confirmed and not confirmed end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from doctor.cycle import CycleResult
from doctor.engines import EngineRef
from doctor.plan import Plan
from doctor.remedy.audit import AuditLog
from doctor.serve.alerts import parse
from doctor.serve.events import EventHub
from doctor.serve.inbox import Inbox
from doctor.serve.mapping import AlertMapper
from doctor.serve.metrics import DaemonMetrics
from doctor.serve.runner import Daemon
from playbooks.model import Finding
from tests.serve.payloads import alert, body

HOT = EngineRef("hot", "hot", "http://127.0.0.1:8000")


class FakeCycle:
    """Returns `self.result` after `self.takes_s`; records each call's plan and whether two ever overlapped."""

    def __init__(self, takes_s: float) -> None:
        self.takes_s = takes_s
        self.plans: list[Plan] = []
        self.running = 0
        self.overlapped = False
        self.findings: list[Finding] = []
        self.pending: list[Finding] = []

    async def __call__(self, plan: Plan, *, clock: Any) -> CycleResult:
        self.running += 1
        self.overlapped |= self.running > 1
        self.plans.append(plan)
        try:
            await asyncio.sleep(self.takes_s)
        finally:
            self.running -= 1
        report = {"status": "ok", "generated_at": "now", "findings": [f.to_dict() for f in self.findings],
                  "pending": [f.to_dict() for f in self.pending], "actions": [], "engines": []}
        return CycleResult(report, list(self.findings), list(self.pending), {})


def daemon(tmp_path: Path, cycle: FakeCycle, interval_s: float) -> Daemon:
    plan = Plan(engines=(HOT,), state_dir=tmp_path)
    return Daemon(plan, interval_s=interval_s, alert_wait_s=600, inbox=Inbox(tmp_path, capacity=10),
                  mapper=AlertMapper([HOT]), audit=AuditLog(tmp_path / "audit.jsonl"), metrics=DaemonMetrics(),
                  events=EventHub(), cycle=cycle, cycle_timeout_s=60)


def finding(status: str = "firing") -> Finding:
    return Finding("long_prompt_share", "hot", "warning", 0.9, "many long prompts", (), (), "", onset=time.time() - 90,
                   status=status, for_s=60, held_s=30 if status == "pending" else 90)  # type: ignore[arg-type]


def events(tmp_path: Path) -> list[str]:
    return [e["event"] for e in AuditLog(tmp_path / "audit.jsonl").events()]


async def until(probe: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_tick_while_a_cycle_runs_is_skipped_never_queued(tmp_path: Path) -> None:
    cycle = FakeCycle(takes_s=0.2)
    d = daemon(tmp_path, cycle, interval_s=0.05)

    async def go() -> None:
        task = asyncio.create_task(d.run())
        await until(lambda: len(cycle.plans) >= 4)
        task.cancel()

    asyncio.run(go())
    assert not cycle.overlapped
    assert d.metrics.ticks_skipped._value.get() >= 3  # each 0.2 s cycle spans about four 0.05 s ticks


def test_alerts_wake_a_cycle_with_their_trigger_and_are_judged_by_it(tmp_path: Path) -> None:
    cycle = FakeCycle(takes_s=0.05)
    d = daemon(tmp_path, cycle, interval_s=3600)  # only the start's cycle: the rest are the alerts'

    async def go() -> None:
        task = asyncio.create_task(d.run())
        await until(lambda: d.cycles == 1)
        cycle.pending = [finding("pending")]
        await d.offer(parse(body(alert("aa01", instance="127.0.0.1:8000"))).alerts)
        await until(lambda: "alert_pending" in events(tmp_path))
        assert cycle.plans[-1].engine_triggers == {"hot": "alert:aa01"} and d.waiting
        cycle.pending, cycle.findings = [], [finding()]
        d._wake.set()  # the next tick
        await until(lambda: "alert_confirmed" in events(tmp_path))
        cycle.findings = []
        await d.offer(parse(body(alert("bb02", instance="127.0.0.1:8000"))).alerts)
        await until(lambda: "alert_not_confirmed" in events(tmp_path))
        task.cancel()

    asyncio.run(go())
    assert not cycle.overlapped and not d.waiting and d.inbox.depth == 0
    assert events(tmp_path) == ["alert_received", "alert_pending", "alert_confirmed", "alert_received",
                                "alert_not_confirmed"]


def test_an_alert_that_arrives_during_a_cycle_waits_for_the_next(tmp_path: Path) -> None:
    cycle = FakeCycle(takes_s=0.3)
    d = daemon(tmp_path, cycle, interval_s=3600)

    async def go() -> None:
        task = asyncio.create_task(d.run())
        await until(lambda: cycle.running == 1)  # the start's cycle, reading without the alert
        await d.offer(parse(body(alert("cc03", instance="127.0.0.1:8000"))).alerts)
        await until(lambda: "alert_not_confirmed" in events(tmp_path))
        task.cancel()

    asyncio.run(go())
    assert [p.engine_triggers for p in cycle.plans] == [{}, {"hot": "alert:cc03"}]


def test_a_resolved_alert_ends_the_wait(tmp_path: Path) -> None:
    cycle = FakeCycle(takes_s=0.01)
    d = daemon(tmp_path, cycle, interval_s=3600)

    async def go() -> None:
        task = asyncio.create_task(d.run())
        await until(lambda: d.cycles == 1)
        cycle.pending = [finding("pending")]
        await d.offer(parse(body(alert("dd04", instance="127.0.0.1:8000"))).alerts)
        await until(lambda: "alert_pending" in events(tmp_path))
        await d.offer(parse(body(alert("dd04", status="resolved", instance="127.0.0.1:8000"))).alerts)
        await until(lambda: "alert_resolved" in events(tmp_path))
        task.cancel()

    asyncio.run(go())
    resolved = [e for e in AuditLog(tmp_path / "audit.jsonl").events() if e["event"] == "alert_resolved"]
    assert resolved[0]["ended_wait"] is True and not d.waiting and d.inbox.depth == 0


def test_event_listeners_and_slow_subscribers_stay_bounded() -> None:
    hub = EventHub(keep=5)
    got: list[str] = []
    hub.listen(lambda kind, data: got.append(kind))
    hub.listen(lambda kind, data: 1 / 0)  # a broken sink is logged, never stops the others

    async def go() -> list[str]:
        stream = hub.stream(heartbeat_s=0.05)
        assert await stream.__anext__() == ": connected\n\n"
        for i in range(50):
            hub.publish("cycle", {"i": i})
        chunks = [await stream.__anext__() for _ in range(5)]
        await stream.aclose()
        return chunks

    chunks = asyncio.run(go())
    assert got == ["cycle"] * 50 and hub.subscribers == 0
    assert any(c.startswith("event: dropped") for c in chunks) and '"i": 49' in chunks[-1]


def test_a_stop_that_lands_as_a_cycle_ends_stops_the_daemon(tmp_path: Path) -> None:
    """The daemon's stop (its task cancelled) landing in the loop iteration a cycle returns ends the loops: Python
    3.11's wait_for returned the cycle's result and dropped that cancel, and the shutdown then waited on loops that
    went on."""
    stopping: list[asyncio.Task[Any]] = []

    class EndsAsTheStopLands(FakeCycle):
        async def __call__(self, plan: Plan, *, clock: Any) -> CycleResult:
            result = await super().__call__(plan, clock=clock)
            if stopping:
                asyncio.get_running_loop().call_soon(stopping[0].cancel)  # runs before the loop sees the result
            return result

    d = daemon(tmp_path, EndsAsTheStopLands(takes_s=0.01), interval_s=0.05)

    async def go() -> None:
        task = asyncio.create_task(d.run())
        await until(lambda: d.cycles >= 1)
        stopping.append(task)
        done, _ = await asyncio.wait({task}, timeout=10)
        assert task in done and task.cancelled()
        after = d.cycles
        await asyncio.sleep(0.5)  # ten intervals
        assert d.cycles == after, "the cycle loop went on after the daemon's task was cancelled"

    asyncio.run(go())
