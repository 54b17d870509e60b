"""One run and a pair of runs: the scenario's trace in virtual time, the doctor's cycle, the capacity probe."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from doctor.config import DoctorConfig
from doctor.pipeline import build_views, run_playbooks
from router.policy import initial_policy
from sim.scenarios import Scenario
from sim.workload import RequestSpec
from trials.efficacy.actor import HarnessDoctor
from trials.efficacy.harness import EfficacyHarness
from trials.efficacy.measure import measure
from trials.efficacy.reading import MemoryHistory, Observer, history_at
from trials.efficacy.result import Evaluation, RunResult
from trials.efficacy.vrouter import VirtualRouter, engine_url
from trials.scenario import WARMUP_S, ScenarioSettings

DRAIN_LIMIT_S = 900.0  # after the trace ends, requests still in flight get this long to finish
# The capacity probe (peak QPS within SLO): after the incident and the drain, with the doctor no longer acting,
# the incident's own request mix arrives at a rate ramping from PROBE_FROM to PROBE_TO times the incident's mean
# rate over PROBE_S; the most requests served within the SLOs in a PEAK_WINDOW_S window is the deployment's
# capacity as the incident (and the doctor) left it.
PROBE_FROM, PROBE_TO, PROBE_S, PROBE_TAIL_S = 0.5, 3.0, 450.0, 60.0


def run(scenario: Scenario, *, seed: int = 0, mode: str = "auto", duration_s: float | None = None,
        eval_every_s: float = 30.0, gpus: int = 4, config: DoctorConfig | None = None,
        probe: bool = False) -> RunResult:
    """Run `scenario` in virtual time with the doctor in `mode` (observe: reads and reports only; auto: acts)
    behind the guardrails `config` sets (default: the shipped defaults, DoctorConfig()); with `probe`, then
    measure the capacity the deployment was left with (see PROBE_S)."""
    if mode not in ("observe", "auto"):
        raise ValueError(f"mode must be observe or auto, got {mode!r}")
    if eval_every_s <= 0:
        raise ValueError(f"eval_every_s must be > 0, got {eval_every_s}")
    duration = scenario.duration_s if duration_s is None else duration_s
    if duration <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration}")
    sc = scenario.with_duration(duration)
    h = EfficacyHarness(seed=seed)
    for e in sc.engines:  # dev mode on, as the deployment runs it, so /sleep and /wake_up exist
        h.add_engine(e.name, sc.argv_for(e.name, seed), env={**e.env, "VLLM_SERVER_DEV_MODE": "1"})
        h.warm_up(e.name, at=h.start)
    h.run_until(h.start + WARMUP_S)
    t0 = h.now
    router = VirtualRouter(h, initial_policy([engine_url(e.name) for e in sc.engines if e.role == "hot"],
                                             [engine_url(e.name) for e in sc.engines if e.role == "cold"],
                                             route_threshold_tokens=sc.route_threshold),
                           model=sc.argv_for(sc.engines[0].name, seed)[0])  # requests name the served model
    specs = list(sc.requests(seed))
    for spec in specs:
        router.submit(spec, t0 + spec.arrival_s)
    for incident in sc.timeline:
        if incident.kind in ("fault", "restart"):
            h.schedule(t0 + incident.at_s, functools.partial(h.apply, incident))
    observer = Observer(h, sc)
    settings = ScenarioSettings(sc.templates_on)
    history = MemoryHistory()
    state: MutableMapping[str, dict[str, Any]] = {}
    doctor = HarnessDoctor(h, router, gpus=gpus, config=config or DoctorConfig(), on_engine=observer.watch)
    evaluations: list[Evaluation] = []
    t_prev, k = t0, 1
    while k * eval_every_s <= duration + 1e-9:
        now = t0 + k * eval_every_s
        h.run_until(now)
        window = now - t_prev
        readings, signals = observer.read_signals(window, history,
                                                  long_prompt_tokens=router.policy.route_threshold_tokens)
        views = build_views(readings, signals, now=now, settings=settings,
                            history_for=functools.partial(history_at, history, now), in_progress=doctor.busy)
        findings = run_playbooks(views, state, now=now, settings=settings)
        evaluations.append(Evaluation(now - t0, findings))
        if mode == "auto":
            doctor.cycle(now, findings, signals)
        t_prev, k = now, k + 1
    end = t0 + duration
    h.run_until(end)
    limit = end + DRAIN_LIMIT_S
    while h.now < limit and any(o.result == "unfinished" and o.rejected is None for o in router.outcomes
                                if o.sent < end):
        h.run_for(10.0)
    n_trace = len(router.outcomes)
    rates = _probe(h, router, specs, sc.onset_s or 0.0, duration, seed) if probe else (0.0, 0.0)
    return RunResult(sc, seed, mode, t0, duration, router.outcomes[:n_trace], evaluations,
                     [doctor.describe(a, t0) for a in doctor.log], [(t - t0, c) for t, c in router.changes],
                     router.outcomes[n_trace:], rates)


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
