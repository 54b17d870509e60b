"""One run and a pair of runs: the scenario's trace in virtual time, the doctor's own cycle (doctor.cycle.run_cycle)
over the deployment, the capacity probe."""

from __future__ import annotations

import asyncio
import functools
import math
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from doctor.config import DoctorConfig
from doctor.cycle import run_cycle
from doctor.plan import Plan
from doctor.remedy.journal import Journal
from sim.scenarios import Scenario
from sim.workload import RequestSpec
from trials.efficacy.deployment import Deployment, deploy
from trials.efficacy.harness import EfficacyHarness
from trials.efficacy.measure import measure
from trials.efficacy.result import Evaluation, RunResult
from trials.efficacy.vrouter import VirtualRouter
from trials.scenario import WARMUP_S

IN_EFFECT = ("applied", "verified", "rolled_back", "expired")  # statuses of an action that was carried out
Seen = tuple[float, float | None, dict[str, Any]]  # first reported, first in effect (virtual time), latest entry

DRAIN_LIMIT_S = 900.0  # after the trace ends, requests still in flight get this long to finish
# The capacity probe (peak QPS within SLO): after the incident and the drain, with the doctor no longer acting,
# the incident's own request mix arrives at a rate ramping from PROBE_FROM to PROBE_TO times the incident's mean
# rate over PROBE_S; the most requests served within the SLOs in a PEAK_WINDOW_S window is the deployment's
# capacity as the incident (and the doctor) left it.
PROBE_FROM, PROBE_TO, PROBE_S, PROBE_TAIL_S = 0.5, 3.0, 450.0, 60.0


def run(scenario: Scenario, *, seed: int = 0, mode: str = "auto", duration_s: float | None = None,
        eval_every_s: float = 30.0, gpus: int = 4, config: DoctorConfig | None = None,
        probe: bool = False) -> RunResult:
    """Run `scenario` in virtual time with the doctor's cycle every `eval_every_s`, in `mode` (observe: it reads
    and reports only; auto: `doctor diagnose --fix` in auto mode) behind the guardrails `config` sets (default: the
    shipped defaults, DoctorConfig()), on a machine with `gpus` GPUs; with `probe`, then measure the capacity the
    deployment was left with (see PROBE_S)."""
    if mode not in ("observe", "auto"):
        raise ValueError(f"mode must be observe or auto, got {mode!r}")
    if eval_every_s <= 0:
        raise ValueError(f"eval_every_s must be > 0, got {eval_every_s}")
    duration = scenario.duration_s if duration_s is None else duration_s
    if duration <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration}")
    sc = scenario.with_duration(duration)
    h = EfficacyHarness(seed=seed)
    with tempfile.TemporaryDirectory(prefix="doctor-efficacy-") as tmp:
        d = deploy(h, sc, seed=seed, tmp=Path(tmp), gpus=gpus, config=config)
        h.run_until(h.start + WARMUP_S)
        t0 = h.now
        specs = list(sc.requests(seed))
        for spec in specs:
            d.router.submit(spec, t0 + spec.arrival_s)
        for incident in sc.timeline:
            if incident.kind in ("fault", "restart"):
                h.schedule(t0 + incident.at_s, functools.partial(h.apply, incident))
        onset = t0 + (sc.onset_s or 0.0)
        busy_at_onset: dict[str, float] = {}
        h.schedule(onset, lambda: busy_at_onset.update({life.record: life.busy_s(h) for life in d.procs.lifetimes}))
        evaluations, seen = asyncio.run(_cycles(d, d.plan(fix=mode == "auto"), t0=t0, every_s=eval_every_s,
                                                duration_s=duration))
        actions = _actions(d, seen, t0)
    end = t0 + duration
    h.run_until(end)
    usage = _usage(d, busy_at_onset, onset, end)
    limit = end + DRAIN_LIMIT_S
    router = d.router
    while h.now < limit and any(o.result == "unfinished" and o.rejected is None for o in router.outcomes
                                if o.sent < end):
        h.run_for(10.0)
    n_trace = len(router.outcomes)
    rates = _probe(h, router, specs, sc.onset_s or 0.0, duration, seed) if probe else (0.0, 0.0)
    return RunResult(sc, seed, mode, t0, duration, router.outcomes[:n_trace], evaluations, actions,
                     [(t - t0, c) for t, c in router.changes], router.outcomes[n_trace:], rates, usage)


def _usage(d: Deployment, busy_at_onset: dict[str, float], start: float, end: float) -> dict[str, Any]:
    """GPU-seconds held by every engine process over [start, end), and each engine's utilisation (time spent
    stepping over time alive) there, for those alive at least a minute of it."""
    h = d.h
    gpu_s = sum(life.gpu_seconds(h, start, end) for life in d.procs.lifetimes)
    util: dict[str, float] = {}
    for life in d.procs.lifetimes:
        alive = life.gpu_seconds(h, start, end) / max(life.gpus, 1)
        if alive >= 60.0:
            busy = life.busy_s(h) - busy_at_onset.get(life.record, 0.0)
            util[life.record] = min(1.0, max(0.0, busy) / alive)
    return {"gpu_s": gpu_s, "util": util}


async def _cycles(d: Deployment, plan: Plan, *, t0: float, every_s: float,
                  duration_s: float) -> tuple[list[Evaluation], dict[str, Seen]]:
    """The doctor's cycle every `every_s` (its second read falls on the tick); a cycle that overran (a relaunch
    waits for the new engine) skips the ticks it covered, as cron runs find the lock held. Returns the
    evaluations and, per action, when a report first had it, when it was first in effect and its latest
    report entry."""
    h = d.h
    evaluations: list[Evaluation] = []
    seen: dict[str, Seen] = {}
    k = 1
    while k * every_s <= duration_s + 1e-9:
        start = t0 + k * every_s - plan.sample_s
        h.run_until(start)
        d.logs.append()
        result = await run_cycle(plan, clock=lambda: h.now)
        # judged at the tick (its second read), not when the cycle returned: a cycle that brought up a replica
        # returns minutes later, and its findings were not later for it
        evaluations.append(Evaluation(start + plan.sample_s - t0, result.findings))
        for a in result.report.get("actions", []):
            first, effective, _ = seen.get(a["id"], (h.now, None, a))
            if effective is None and a["status"] in IN_EFFECT:
                effective = h.now
            seen[a["id"]] = (first, effective, a)
        k = max(k + 1, math.ceil((h.now + plan.sample_s - t0) / every_s - 1e-9))
    return evaluations, seen


def _actions(d: Deployment, seen: dict[str, Seen], t0: float) -> list[dict[str, Any]]:
    """Every action the doctor took or refused, from its reports and its journal (steps, verification)."""
    records = Journal(d.state_dir).read().records
    out = []
    for rid, (first, effective, a) in seen.items():
        rec = records.get(rid)
        created = rec.created_at if rec is not None else first
        sig = (rec.verify or {}).get("signal") if rec is not None else None
        before = {sig: rec.before.get(sig)} if rec is not None and sig else {}
        after = {sig: rec.after.get(sig)} if rec is not None and sig and sig in rec.after else {}
        out.append({"id": rid, "t_s": created - t0, "effective_s": None if effective is None else effective - t0,
                    "action": a["action"], "target": a["target"],
                    "params": {k: v for k, v in a["params"].items() if k not in ("argv", "env")},
                    "playbook": rec.playbook if rec else "-", "engine": a.get("engine"),
                    "trigger": rec.trigger if rec else "trial", "status": a["status"], "reason": a["reason"] or "",
                    "verify": rec.verify if rec else None, "before": before, "after": after,
                    "steps": list(rec.steps) if rec else []})
    return sorted(out, key=lambda a: a["t_s"])


def _probe(h: EfficacyHarness, router: VirtualRouter, specs: Sequence[RequestSpec], onset_s: float,
           duration_s: float, seed: int) -> tuple[float, float]:
    """Send the capacity probe's ramp through `router` and run it out; returns its start and end rates."""
    mix = [s for s in specs if s.arrival_s >= onset_s] or list(specs)
    if not mix:
        return (0.0, 0.0)
    rate = len(mix) / max(duration_s - onset_s, 1.0)
    r0, r1 = PROBE_FROM * rate, PROBE_TO * rate
    start = h.now
    first_index = max(s.index for s in specs) + 1
    rng = random.Random(seed * 7919 + 17)
    for i, t in enumerate(ramp_arrivals(rng, r0, r1, PROBE_S)):
        spec = replace(mix[i % len(mix)], index=first_index + i, arrival_s=start - h.start + t)
        router.submit(spec, start + t)
    h.run_until(start + PROBE_S + PROBE_TAIL_S)
    return (r0, r1)


def ramp_arrivals(rng: random.Random, r0: float, r1: float, span_s: float) -> list[float]:
    """Poisson arrival times over [0, span_s) whose rate grows linearly from r0 to r1 (by inverting the
    cumulative rate r0*t + (r1-r0)*t^2/(2*span) at unit-exponential steps)."""
    a = (r1 - r0) / (2.0 * span_s)
    out: list[float] = []
    total = 0.0
    while True:
        total += rng.expovariate(1.0)
        t = (-r0 + math.sqrt(r0 * r0 + 4.0 * a * total)) / (2.0 * a) if a > 0 else total / r0
        if t >= span_s:
            return out
        out.append(t)


@dataclass
class Pair:
    baseline: RunResult
    doctor: RunResult

    def metrics(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return measure(self.baseline), measure(self.doctor)


def run_pair(scenario: Scenario, *, seed: int = 0, duration_s: float | None = None, **kw: Any) -> Pair:
    """The same trace and seed without the doctor acting (observe) and with it in auto mode."""
    return Pair(run(scenario, seed=seed, mode="observe", duration_s=duration_s, **kw),
                run(scenario, seed=seed, mode="auto", duration_s=duration_s, **kw))
