"""The daemon's loops: the one doctor cycle on an interval and on each alert, and the alerts' intake.

Cycles never overlap: one cycle reads every engine at once, and a tick that comes while the previous cycle still
runs is skipped (counted in doctor_ticks_skipped_total), never queued. An alert wakes the loop at once: a cycle
starts now, or right after the one running (several alerts share it). Each engine with alerts waiting has its
records' trigger `alert:<fingerprint>` (doctor.plan.Plan.engine_triggers); the alerts are judged by that cycle
(doctor.serve.waits) and leave the durable queue only once handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from doctor.cycle import CycleResult
from doctor.leader.elector import Elector
from doctor.plan import Plan
from doctor.remedy.audit import AuditLog
from doctor.serve.alerts import Alert
from doctor.serve.events import EventHub
from doctor.serve.inbox import Entry, Inbox, Offered
from doctor.serve.mapping import AlertMapper
from doctor.serve.metrics import DaemonMetrics
from doctor.serve.waits import Waiting, judge

log = logging.getLogger("doctor.serve")
CycleFn = Callable[..., Awaitable[CycleResult]]


class Daemon:
    """Cycles, alert waits and the latest state (what the API serves)."""

    def __init__(self, plan: Plan, *, interval_s: float, alert_wait_s: float, inbox: Inbox, mapper: AlertMapper,
                 audit: AuditLog, metrics: DaemonMetrics, events: EventHub, cycle: CycleFn,
                 cycle_timeout_s: float, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, elector: Elector | None = None) -> None:
        """`elector`: this replica's side of a leader election (doctor.leader); it acts only while that says it
        may, and reads, judges and answers either way. None: it acts alone."""
        self.plan = plan
        self.interval_s = interval_s
        self.alert_wait_s = alert_wait_s
        self.inbox = inbox
        self.mapper = mapper
        self.audit = audit
        self.metrics = metrics
        self.events = events
        self.cycle = cycle
        self.cycle_timeout_s = cycle_timeout_s
        self.clock = clock
        self.monotonic = monotonic
        self.elector = elector
        self.waiting: dict[str, Waiting] = {}
        self.latest: CycleResult | None = None
        self.latest_at: float | None = None
        self.cycles = 0
        self.running = False
        self._wake = asyncio.Event()
        self._intake: asyncio.Queue[Entry] = asyncio.Queue()
        self._io = asyncio.Lock()
        self._replayed: set[str] = set()  # queued before this start: handled again, said so in the audit

    # -- the webhook's side

    async def offer(self, alerts: tuple[Alert, ...]) -> Offered:
        """Queue the alerts durably (raises QueueFull); the intake handles them after the webhook has answered."""
        async with self._io:
            offered = await asyncio.to_thread(self.inbox.offer, alerts)
        for entry in offered.accepted:
            self._intake.put_nowait(entry)
        self.metrics.queue_depth.set(self.inbox.depth)
        return offered

    # -- the election

    def may_act(self) -> str | None:
        """None while this daemon may act; else why not (a standby replica)."""
        return self.elector.may_act() if self.elector is not None else None

    def leader_state(self) -> dict[str, Any]:
        if self.elector is None:
            return {"role": "leader", "store": None, "why": "no [serve.leader]: this daemon acts alone"}
        return {**self.elector.state(), "why": self.elector.may_act()}

    def leading_changed(self, leading: bool) -> None:
        """The elector's news: a new leader acts at once (its cycle starts now), a lost lease is published."""
        self.events.publish("leader", {"role": "leader" if leading else "standby"})
        if leading:
            self._wake.set()

    # -- loops

    async def run(self) -> None:
        """Replay the queue, then run the intake and the cycles until cancelled."""
        for problem in self.inbox.problems:
            log.warning("alert queue: %s", problem)
        for entry in list(self.inbox.pending.values()):
            self._replayed.add(entry.key)
            self._intake.put_nowait(entry)
        self.metrics.queue_depth.set(self.inbox.depth)
        await asyncio.gather(self._intake_loop(), self._cycle_loop())

    async def _intake_loop(self) -> None:
        while True:
            entry = await self._intake.get()
            try:
                await self._take(entry)
            except Exception:  # one bad alert must not stop the intake; it stays queued for the next start
                log.exception("alert %s could not be handled", entry.key)

    async def _cycle_loop(self) -> None:
        next_tick = self.monotonic()
        while True:
            # asyncio.timeout, not wait_for, here and below: Python 3.11's wait_for drops a cancel (the daemon's stop)
            # that lands in the iteration its awaitable completes, and this loop then went on after the stop
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_tick - self.monotonic())):
                    await self._wake.wait()
            self._wake.clear()
            ticked = self.monotonic() >= next_tick
            await self.run_once()
            if ticked:
                next_tick += self.interval_s
                now = self.monotonic()
                while next_tick <= now:  # the cycle overran: those ticks are skipped, not queued
                    next_tick += self.interval_s
                    self.metrics.ticks_skipped.inc()

    async def run_once(self) -> CycleResult | None:
        """One cycle over every engine, with the alerts' triggers; judges the alerts that arrived before it."""
        started_at, started = self.clock(), self.monotonic()
        judged = {k: w for k, w in self.waiting.items() if w.entry.received_at <= started_at}
        fingerprints: dict[str, set[str]] = {}
        for w in judged.values():
            fingerprints.setdefault(w.engine, set()).add(w.fingerprint)
        triggers = {e: "alert:" + ",".join(sorted(fps)) for e, fps in fingerprints.items()}
        gate = self.elector.may_act if self.elector is not None else None
        leading = gate is None or gate() is None  # a standby reads and judges; it changes nothing
        plan = dataclasses.replace(self.plan, trigger="serve", engine_triggers=triggers,
                                   fix=self.plan.fix and leading, act_gate=gate)
        label = "alert" if triggers else "interval"
        self.running = True
        try:
            async with asyncio.timeout(self.cycle_timeout_s):
                result = await self.cycle(plan, clock=self.clock)
        except TimeoutError:
            self.metrics.cycles.labels("timeout").inc()
            log.warning("a cycle gave up after %.0f s", self.cycle_timeout_s)
            self.events.publish("cycle_failed", {"reason": f"timed out after {self.cycle_timeout_s:g} s"})
            return None
        except Exception as exc:
            self.metrics.cycles.labels("error").inc()
            log.exception("a cycle failed")
            self.events.publish("cycle_failed", {"reason": f"{type(exc).__name__}: {exc}"})
            return None
        finally:
            self.running = False
        self.metrics.cycles.labels("ok").inc()
        self.metrics.cycle_s.labels(label).observe(self.monotonic() - started)
        self.latest, self.latest_at, self.cycles = result, self.clock(), self.cycles + 1
        self.metrics.cycle(result.report)
        for key, w in judged.items():
            if key in self.waiting:
                self._judge(w, result)
        self.metrics.waiting.set(len(self.waiting))
        report = result.report
        self.events.publish("cycle", {"status": report["status"], "generated_at": report["generated_at"],
                                      "findings": [f["id"] for f in report["findings"]],
                                      "pending": [f["id"] for f in report["pending"]],
                                      "actions": [{k: a[k] for k in ("id", "action", "status")}
                                                  for a in report.get("actions", [])]})
        return result

    # -- alerts

    async def _take(self, entry: Entry) -> None:
        alert = entry.alert
        target = self.mapper.target(alert)
        base = _fields(entry, target.engine, target.playbook)
        replayed = entry.key in self._replayed
        self._replayed.discard(entry.key)
        self.audit.note("alert_received", **base, **({"replayed": "queued before a restart"} if replayed else {}))
        if not target.known:
            self._done(entry, "unmapped", "alert_unmapped", base, reason=f"recorded, never acted on: {target.why}")
            return
        if alert.status == "resolved":
            ended = [k for k, w in self.waiting.items() if w.fingerprint == alert.fingerprint]
            for k in ended:
                w = self.waiting.pop(k)
                self._done(w.entry, "resolved", None, {})
            self._done(entry, "resolved", "alert_resolved", base, ended_wait=bool(ended),
                       reason="resolved while waiting for the doctor's reading: the wait ends" if ended else
                       "resolved")
            self.metrics.waiting.set(len(self.waiting))
            return
        self.waiting[entry.key] = Waiting(entry, target, entry.received_at + self.alert_wait_s)
        self.metrics.waiting.set(len(self.waiting))
        self.events.publish("alert", {**base, "outcome": "waiting"})
        self._wake.set()

    def _judge(self, w: Waiting, result: CycleResult) -> None:
        verdict = judge(w, result, self.clock())
        base = _fields(w.entry, w.target.engine, w.target.playbook)
        if verdict.outcome == "waiting":
            if verdict.event:
                self.audit.note(verdict.event, **base, **verdict.fields)
            return
        del self.waiting[w.entry.key]
        self._done(w.entry, verdict.outcome, verdict.event, base, **verdict.fields)

    def _done(self, entry: Entry, outcome: str, event: str | None, base: dict[str, Any], **fields: Any) -> None:
        if event:
            self.audit.note(event, **base, **fields)
            self.events.publish("alert", {**base, "outcome": outcome, **fields})
        self.inbox.done(entry.key, outcome)
        self.metrics.alerts.labels(entry.alert.status, outcome).inc()
        self.metrics.queue_depth.set(self.inbox.depth)


def _fields(entry: Entry, engine: str | None, playbook: str | None) -> dict[str, Any]:
    a = entry.alert
    return {"fingerprint": a.fingerprint, "alertname": a.alertname, "alert_status": a.status, "engine": engine,
            "playbook": playbook, "starts_at": a.starts_at, "trigger": f"alert:{a.fingerprint}",
            "group_key": a.group_key}
