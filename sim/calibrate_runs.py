"""The calibration measurements, each a deterministic run in the virtual-time harness.

Saturation throughput and memory/compute busy time (`saturate`), percentiles at a fixed load
(`latency`), one long prompt joining a decode batch (`long_prompt_effect`) and the cold-start
penalty (`cold_start`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.calibrate_scenario import Scenario
from sim.harness import Harness, HarnessEngine
from sim.workload import RequestSpec, generate


def _warm_up(h: Harness, engine: str, max_num_seqs: int, until_s: float) -> None:
    """The article's warm-up: tiny requests at batch 1, 2, 4, ... so later steps pay no cold start."""
    sizes = []
    b = 1
    while b < max_num_seqs:
        sizes.append(b)
        b *= 2
    sizes.append(max_num_seqs)
    gap = until_s / (len(sizes) + 1)
    index = -1
    for k, size in enumerate(sizes):
        for _ in range(size):
            spec = RequestSpec(index=index, arrival_s=k * gap, prompt_tokens=8, output_tokens=4, long=False)
            h.submit(engine, spec)
            index -= 1


StepLog = list[tuple[float, float, float, float]]  # (end, duration, memory busy, compute busy)


def _record_steps(e: HarnessEngine) -> StepLog:
    """Every step the engine runs from now on, through its step observer."""
    log: StepLog = []
    e.core.step_observer = lambda end, cost: log.append(
        (end, cost.duration_s, cost.memory_busy_s, cost.compute_busy_s))
    return log


def _engine(sc: Scenario, max_num_seqs: int, *, warm: bool = True) -> tuple[Harness, HarnessEngine]:
    h = Harness(seed=sc.seed)
    e = h.add_engine("e", sc.argv(max_num_seqs))
    if warm:
        _warm_up(h, "e", max_num_seqs, sc.warmup_s)
    return h, e


@dataclass
class Saturation:
    """A saturated run's steady window."""

    qps: float
    tokens_per_s: float
    mem_busy: float
    compute_busy: float
    mean_running: float
    preemptions: int
    steps: int


def saturate(sc: Scenario, max_num_seqs: int, long_share: float | None = None) -> Saturation:
    """Completion rate with far more offered load than capacity, over [warm-up + settle, + window]."""
    h, e = _engine(sc, max_num_seqs)
    step_log = _record_steps(e)
    t0 = h.start + sc.warmup_s
    lo, hi = t0 + sc.sat_settle_s, t0 + sc.sat_settle_s + sc.sat_window_s
    specs = generate(sc.workload(sc.sat_rate_qps, sc.sat_settle_s + sc.sat_window_s, long_share))
    h.load(specs, offset_s=sc.warmup_s)
    running: list[int] = []
    pre0 = 0
    t = lo
    h.run_until(lo)
    pre0 = e.core.metrics.preemptions
    while t < hi:
        t = min(hi, t + 1.0)
        h.run_until(t)
        running.append(len(e.core.scheduler.running))
    done = [r for r in h.records if r.spec.index >= 0 and r.finished is not None and r.error is None
            and lo <= r.finished < hi]
    steps = [s for s in step_log if lo <= s[0] < hi]
    span = hi - lo
    return Saturation(
        qps=len(done) / span,
        tokens_per_s=sum(r.spec.prompt_tokens + r.tokens for r in done) / span,
        mem_busy=sum(s[2] for s in steps) / span,
        compute_busy=sum(s[3] for s in steps) / span,
        mean_running=sum(running) / max(1, len(running)),
        preemptions=e.core.metrics.preemptions - pre0,
        steps=len(steps),
    )


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    k = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return s[k]


@dataclass
class Latency:
    """P99s at a fixed share of a configuration's saturation."""

    rate_qps: float
    e2e_p99: float
    ttft_p99: float
    tpot_p99: float
    ttft_p99_short: float
    ttft_p99_long: float
    e2e_p50: float
    completed: int


def latency(sc: Scenario, max_num_seqs: int, rate_qps: float) -> Latency:
    """Poisson load at `rate_qps`; percentiles over the requests sent in the measured window."""
    h, _ = _engine(sc, max_num_seqs)
    duration = sc.p99_settle_s + sc.p99_window_s
    h.load(generate(sc.workload(rate_qps, duration, seed_offset=1)), offset_s=sc.warmup_s)
    h.run_until(h.start + sc.warmup_s + duration)
    h.drain(limit_s=600.0)
    lo = h.start + sc.warmup_s + sc.p99_settle_s
    recs = [r for r in h.records if r.spec.index >= 0 and r.sent >= lo and r.error is None]
    fin = [r for r in recs if r.e2e is not None]
    e2e = [r.e2e for r in fin if r.e2e is not None]
    ttft = [r.ttft for r in fin if r.ttft is not None]
    tpot = [(r.e2e - r.ttft) / (r.tokens - 1) for r in fin
            if r.e2e is not None and r.ttft is not None and r.tokens > 1]
    short = [r.ttft for r in fin if r.ttft is not None and not r.spec.prompt_tokens >= sc.long_min]
    long = [r.ttft for r in fin if r.ttft is not None and r.spec.prompt_tokens >= sc.long_min]
    return Latency(rate_qps, _pct(e2e, 0.99), _pct(ttft, 0.99), _pct(tpot, 0.99), _pct(short, 0.99),
                   _pct(long, 0.99), _pct(e2e, 0.5), len(fin))


@dataclass
class StepEffect:
    """Mean step time while one long prompt is in a steady decode batch, and without it."""

    base_step_s: float
    with_step_s: float
    steps: int

    @property
    def increase(self) -> float:
        return self.with_step_s / self.base_step_s - 1.0


def long_prompt_effect(sc: Scenario) -> StepEffect:
    """A decode batch of `step_batch` long-output requests; one `step_prompt` prompt joins at t0 + 10 s.

    The window runs from the join to the long request's last token; the control run has the same
    window without it.
    """
    def run(with_long: bool, window: tuple[float, float] | None) -> tuple[list[tuple[float, float]], float, float]:
        h, e = _engine(sc, max(16, sc.step_batch + 1))
        step_log = _record_steps(e)
        t0 = sc.warmup_s
        for i in range(sc.step_batch):
            h.submit("e", RequestSpec(index=i, arrival_s=t0 + 0.01 * i, prompt_tokens=400, output_tokens=1000,
                                      long=False))
        join = h.start + t0 + 10.0
        rec = None
        if with_long:
            rec = h.submit("e", RequestSpec(index=sc.step_batch, arrival_s=t0 + 10.0,
                                            prompt_tokens=sc.step_prompt, output_tokens=sc.step_output,
                                            long=True))
        h.run_until(join + 60.0)
        end = rec.finished if rec is not None and rec.finished is not None else join + 60.0
        lo, hi = window if window is not None else (join, end)
        steps = [(s[0], s[1]) for s in step_log if lo < s[0] <= hi]
        return steps, lo, hi

    with_steps, lo, hi = run(True, None)
    base_steps, _, _ = run(False, (lo, hi))
    def mean(xs: list[tuple[float, float]]) -> float:
        return sum(d for _, d in xs) / max(1, len(xs))

    return StepEffect(mean(base_steps), mean(with_steps), len(with_steps))


def cold_start(sc: Scenario, batch: int) -> float:
    """Extra seconds a fresh `--enforce-eager` engine's first steps at `batch` pay over one with CUDA graphs
    (which captured them at start-up, before it served; no warm-up modelled).

    One request first warms batch 1; then `batch` 8-token prompts arrive together (the first of them
    starts a batch-1 step, the rest form the first step at `batch`).
    """
    def busy_time(eager: bool) -> float:
        h = Harness(seed=sc.seed)
        # The baseline captures graphs up to max_num_batched_tokens, so none of its steps runs eagerly.
        graphs = ["--compilation-config", '{"max_cudagraph_capture_size": 1048576}']
        argv = sc.argv(max(batch, 4)) + (["--enforce-eager"] if eager else graphs)
        e = h.add_engine("e", argv)
        step_log = _record_steps(e)
        h.submit("e", RequestSpec(index=-1, arrival_s=1.0, prompt_tokens=8, output_tokens=2, long=False))
        h.run_until(h.start + 10.0)
        n = len(step_log)
        for i in range(batch):
            h.submit("e", RequestSpec(index=i, arrival_s=10.0, prompt_tokens=8, output_tokens=2, long=False))
        h.run_until(h.start + 120.0)
        return sum(s[1] for s in step_log[n:])

    return busy_time(True) - busy_time(False)
