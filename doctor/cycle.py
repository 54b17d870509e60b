"""One doctor cycle, the same for every caller: read -> reconcile -> evaluate (with `for` state) -> fix ->
verify -> lift -> record, returning the report (and the objects it was built from).

`doctor diagnose` runs it once, the daemon on an interval and on each alert, the trials in virtual time;
each hands it a `doctor.plan.Plan` (never a CLI's options) and a clock. What a caller needs to change is
I/O, substituted through the plan and the clock, never a step of the cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doctor.plan import Plan

if TYPE_CHECKING:
    from collectors.types import Signals
    from playbooks.model import Finding

SCHEMA_VERSION = "1.1"  # 1.1: pending conditions, finding status, windows per engine


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class CycleResult:
    """One cycle: the report (what `doctor diagnose` prints), the findings and pending conditions it was built
    from, and the signals of each engine as the playbooks judged them."""

    report: dict[str, Any]
    findings: list[Finding]
    pending: list[Finding]
    signals: dict[str, Signals]


async def run_cycle(plan: Plan, *, clock: Callable[[], float] = time.time) -> CycleResult:
    """Read every engine, evaluate the playbooks, act as the mode allows, and build the report."""
    # Imported here so that `doctor diagnose --help` stays fast.
    from doctor import __version__
    from doctor.jsonout import dumps
    from doctor.pipeline import build_views, run_playbooks
    from doctor.reading import EngineHistory, open_history, open_store, read_all, record_history
    from doctor.state import StateDir
    from playbooks.model import worst

    plan = _with_launched(plan)
    history = open_history(plan, clock)
    started = clock()
    results = await read_all(plan, history, clock=clock, store=open_store(plan))
    now = clock()
    state_dir = StateDir(plan.state_dir)
    remediator = _remediator(plan, clock) if plan.fix else None
    in_progress: set[str] = set()
    reconciled: list[Any] = []  # earlier cycles' actions judged (or finished) by this one
    if remediator is not None:
        reconciled = await remediator.reconcile({r.ref.name: r.signals for r in results})
        await asyncio.to_thread(remediator.retry_escalations)  # earlier cycles' undelivered pages, off the loop
        in_progress = remediator.guard.in_progress()
    elif plan.history:
        in_progress = _in_progress(plan, clock)
    frozen = history.frozen() if history else None  # one read for the playbooks' many baselines
    views = build_views([r.reading for r in results], {r.ref.name: r.signals for r in results}, now=now,
                        settings=plan.settings,
                        history_for=(lambda name: EngineHistory(frozen, name)) if frozen else None,
                        in_progress=lambda name: name in in_progress)
    pending: list[Finding] = []
    # The playbooks' `for` state is read, updated and written under one lock: cron and the daemon judging at
    # once would otherwise each write what it read before the other's update (one update lost).
    with _for_state_lock(state_dir) if plan.history else contextlib.nullcontext():
        state: dict[str, dict[str, Any]] = state_dir.load_json("playbooks.json", {}) if plan.history else {}
        was = dumps(state, sort_keys=True)
        findings = run_playbooks(views, state, now=now, settings=plan.settings,
                                 window_is_history=plan.since_s is not None, pending=pending)
        if plan.history and dumps(state, sort_keys=True) != was:  # most cycles change nothing: no rewrite
            state_dir.save_json("playbooks.json", state)
    record_history(history, results, now)
    actions: list[dict[str, Any]] = []
    if remediator is not None:
        records = await remediator.fix(findings, {r.ref.name: r.signals for r in results}, trigger=plan.trigger,
                                       yes=plan.yes, engine_triggers=plan.engine_triggers)
        records = [*(r for r in reconciled if r.status != "applied"), *records]
        if plan.verify_wait_s > 0 and any(r.status == "applied" for r in records):
            async def reread() -> dict[str, Any]:
                again = await read_all(plan, None, clock=clock)
                return {r.ref.name: r.signals for r in again}

            await remediator.verify(records, reread, wait_s=plan.verify_wait_s, sleep=plan.sleep)
        window = float(getattr(plan.settings, "length_limit_lift_after_s", 0.0) or 0.0)
        records += await remediator.lift_idle_limits(
            {r.ref.name: r.signals for r in results}, findings,
            refused_in_window=_refusals_within(history, results, window, now) if history and window else None,
            skip={r.id for r in reconciled})
        actions = [r.report() for r in records]
    readable = any(r.describe()["reachable"] for r in results)
    found, waiting = [f.to_dict() for f in findings], [f.to_dict() for f in pending]
    found_on, waiting_on = _by_engine(findings, found), _by_engine(pending, waiting)
    engines = []
    for r in results:
        described = r.describe()
        described["findings"] = found_on.get(r.ref.name, [])
        described["pending"] = waiting_on.get(r.ref.name, [])
        described["window_s"] = round(r.signals.window_s, 3)
        described["change_in_progress"] = r.ref.name in in_progress
        engines.append(described)
    report = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": iso(now),
        "doctor_version": __version__,
        "window_s": (plan.since_s if plan.since_s is not None and not _fell_back(results) else
                     round(max([r.signals.window_s for r in results] + [now - started]), 3)),
        "status": worst(findings) if readable else "unknown",
        "findings": found,
        "pending": waiting,
        **({"actions": actions} if plan.fix else {}),
        "engines": engines,
    }
    return CycleResult(report, findings, pending, {r.ref.name: r.signals for r in results})


def _by_engine(findings: list[Finding], dicts: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each engine's findings (as dicts, in order); one pass, not one per engine (1,000 engines judged at once)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for f, d in zip(findings, dicts, strict=True):
        out.setdefault(f.engine, []).append(d)
    return out


@contextlib.contextmanager
def _for_state_lock(state_dir: Any, wait_s: float = 5.0) -> Iterator[None]:
    """The playbooks' state lock, waited for at most `wait_s` (another process holds it for a millisecond; one
    stopped while holding it must not stop this cycle: it then goes on without, and says so)."""
    import logging

    from doctor.state import LockHeld

    give_up = time.monotonic() + wait_s
    while True:
        try:
            with state_dir.lock("playbooks"):
                yield
            return
        except LockHeld as exc:
            if time.monotonic() > give_up:
                logging.getLogger("doctor.cycle").warning("playbooks' state written without its lock: %s", exc)
                yield
                return
            time.sleep(0.01)


def _fell_back(results: list[Any]) -> bool:
    """Prometheus was down and the engines were read directly (doctor.reading.read_all says so per engine)."""
    return any("fell back to reading the engine directly" in e for r in results for e in r.reading.errors_extra)


def _refusals_within(history: Any, results: list[Any], window_s: float, now: float) -> float | None:
    """Requests the router refused for its length limit over the last `window_s`, from the history of earlier
    cycles (None without a cycle at least that long ago)."""
    from doctor.remedy.lift import counter_increase

    for r in results:
        current = r.signals.get("length_limit_refusals_total")
        if current is not None:
            series = history.series(r.ref.name, "length_limit_refusals_total", 2 * window_s)
            return counter_increase(series, current, window_s=window_s, now=now)
    return None


def _with_launched(plan: Plan) -> Plan:
    """The plan's engines where the launcher's records say they run now, with the replicas it added."""
    import dataclasses

    from doctor.launched import with_launched

    procs: Any = plan.processes
    launcher = getattr(_config(plan), "launcher", None)
    if procs is None and launcher is not None and launcher.backend == "ray":
        from doctor.remedy.ray_engines import ray_records

        records = ray_records(Path(plan.state_dir) / "engines", launcher)
        return dataclasses.replace(plan, engines=with_launched(plan.engines, records)) if records else plan
    if procs is None:
        if not (Path(plan.state_dir) / "engines").is_dir():
            return plan
        from doctor.remedy.engine_procs import EngineProcesses

        procs = EngineProcesses(Path(plan.state_dir) / "engines")
    records = procs.adopt()
    return dataclasses.replace(plan, engines=with_launched(plan.engines, records)) if records else plan


def _config(plan: Plan) -> Any:
    from doctor.config import DoctorConfig

    return plan.settings if isinstance(plan.settings, DoctorConfig) else DoctorConfig()


def _in_progress(plan: Plan, clock: Callable[[], float]) -> set[str]:
    """Engines another doctor process is changing now (so this cycle says so instead of paging)."""
    if not (Path(plan.state_dir) / "guardrails.json").exists():
        return set()
    from doctor.remedy.guardrails import Guardrails

    return Guardrails(plan.state_dir, _config(plan), clock=clock).in_progress()


def _remediator(plan: Plan, clock: Callable[[], float]) -> Any:
    """The real remediator with the plan's I/O (the clock, the transport, the wait, the launcher), over the
    cycle's engines merged into the config (an engine named only by a flag, a replica the launcher added)."""
    from doctor.config_merge import merge_flags
    from doctor.remedy.setup import remediator

    return remediator(merge_flags(_config(plan), plan.engines), plan.state_dir, router_url=plan.router, clock=clock,
                      transport=plan.transport, sleep=plan.sleep, launcher=plan.launcher,
                      sync_transport=plan.sync_transport, engines=plan.engines, gate=plan.act_gate)
