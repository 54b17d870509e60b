"""`doctor sim calibrate`: the default preset's behaviour next to the seed article's figures.

A benchmark, not a test. Everything runs in virtual time in the harness and is deterministic for a
seed. The figures (seed article, "8xA100 80G" stress test; see ../shared/reference/sim-model.md §2.5-2.6):

- saturation throughput at max_num_seqs 4 / 8 / 16: 32 / 55 / 61 QPS, i.e. 1 : 1.72 : 1.91;
- P99 latency at 8 and 16: 1.2 s and 3.8 s (ratio 3.17; the seed does not say which latency);
- memory-bandwidth utilization at 8 and 16: 68% and 92%;
- one 4K-token prompt joining a batch lengthens the mean step ("batch") time by 40%;
- throughput as the long-prompt share grows: a knee above 20%;
- cold start (first step at a batch size after start): 1.2 s at 4, 3.8 s at 16.

Methods: throughput = completion rate while the queue never empties, over a steady window after a
warm-up; P99 at a fixed fraction of each configuration's own saturation; bandwidth = the engine's
memory-busy time (dcgm DRAM_ACTIVE analogue) over the saturated window; the 4K effect = mean step
time while the 4K request is in the batch versus the same window without it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sim.harness import Harness, HarnessEngine
from sim.presets import DEFAULT_PRESET, get_preset
from sim.workload import RequestSpec, WorkloadSpec, generate

TOLERANCE = 0.15
REPLICAS = 8  # the seed's 8xA100 read as eight TP1 replicas (sim-model §2.5); one is simulated

SEED_QPS = {4: 32.0, 8: 55.0, 16: 61.0}
SEED_P99_S = {8: 1.2, 16: 3.8}
SEED_MEM_BW = {8: 0.68, 16: 0.92}
SEED_4K_INCREASE = 0.40
SEED_LONG_KNEE = 0.20
SEED_COLD_START_S = {4: 1.2, 16: 3.8}


@dataclass(frozen=True)
class Scenario:
    """The calibration scenario: engine arguments, workload and run lengths."""

    preset: str = DEFAULT_PRESET
    engine_args: tuple[str, ...] = (
        "--max-model-len", "8192", "--max-num-batched-tokens", "2048", "--num-gpu-blocks-override", "700",
    )
    batches: tuple[int, ...] = (4, 8, 16)
    prompt_median: float = 400.0
    prompt_sigma: float = 0.8
    prompt_cap: int = 4000
    long_share: float = 0.05
    long_min: int = 4096
    long_max: int = 6144
    output_median: float = 50.0
    output_sigma: float = 0.7
    warmup_s: float = 60.0  # staircase warm-up (batch 1, 2, 4, 8, 16) before any load
    sat_rate_qps: float = 30.0  # far above one replica's capacity: the queue never empties
    sat_settle_s: float = 60.0  # after the warm-up, before the measured window
    sat_window_s: float = 400.0
    p99_fraction: float = 0.85
    p99_settle_s: float = 60.0
    p99_window_s: float = 900.0
    knee_batches: tuple[int, int] = (8, 16)
    knee_shares: tuple[float, ...] = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)
    step_batch: int = 8  # decode batch the 4K prompt joins
    step_prompt: int = 4096
    step_output: int = 50
    seed: int = 0

    def argv(self, max_num_seqs: int) -> list[str]:
        return ["meta-llama/Llama-2-13b-chat-hf", "--preset", self.preset, "--max-num-seqs", str(max_num_seqs),
                *self.engine_args, "--seed", str(self.seed)]

    def workload(self, rate_qps: float, duration_s: float, long_share: float | None = None,
                 seed_offset: int = 0) -> WorkloadSpec:
        return WorkloadSpec(
            rate_qps=rate_qps, duration_s=duration_s, prompt_median=self.prompt_median,
            prompt_sigma=self.prompt_sigma, prompt_cap=self.prompt_cap,
            long_share=self.long_share if long_share is None else long_share,
            long_min=self.long_min, long_max=self.long_max, output_median=self.output_median,
            output_sigma=self.output_sigma, seed=self.seed * 1009 + seed_offset,
        )


FULL = Scenario()
QUICK = replace(FULL, warmup_s=20.0, sat_settle_s=30.0, sat_window_s=60.0, p99_settle_s=20.0, p99_window_s=90.0,
                knee_shares=(0.0, 0.2, 0.4))


@dataclass
class Figure:
    """One row of the table: a seed figure and the simulator's value."""

    key: str
    label: str
    seed: float
    sim: float
    note: str = ""
    unit: str = ""

    @property
    def ratio(self) -> float:
        return self.sim / self.seed if self.seed else math.nan

    @property
    def within(self) -> bool:
        return math.isfinite(self.ratio) and abs(self.ratio - 1.0) <= TOLERANCE

    def as_dict(self) -> dict[str, Any]:
        note = self.note if self.within else f"{self.note}; {_why(self.key)}".strip("; ")
        return {"key": self.key, "label": self.label, "seed": self.seed, "sim": self.sim, "ratio": self.ratio,
                "within": self.within, "unit": self.unit, "note": note}


# Why a figure can miss: appended to the note when it is outside the tolerance.
WHY_NOT = {
    "p99": "at equal load share both configs queue alike; a 3x jump needs the unsupported KV>75% stall (gamma)",
    "mem_bw_util_16": "dense model: weights stream at any batch; bigger batch = more prefill share (sim-model 2.5)",
    "mem_bw_util_8": "memory-busy is weights + KV streaming over wall time; host overhead and prefill are not",
    "long_share_knee_tokens": "token throughput is nearly flat past 10%, so the kneedle point is noise-sensitive",
    "throughput": "prefill compute per request (~100 ms at 0.67 MFU) limits the gain from amortizing decode",
    "step_time": "the window is the 4K request's life in the batch: 2 prefill chunks + its decode steps",
    "cold_start": "cold-start penalty scales with the step's compute (engine multiplies the whole step)",
}


def _why(key: str) -> str:
    for prefix, text in WHY_NOT.items():
        if key.startswith(prefix):
            return text
    return ""


@dataclass
class Report:
    """Figures plus the raw measurements behind them."""

    scenario: Scenario
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": asdict(self.scenario), "figures": [f.as_dict() for f in self.figures],
                "details": self.details}


# ----- runs ----------------------------------------------------------------------------------------


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
    """Extra seconds a fresh engine's first steps at `batch` pay over `--enforce-eager` (no warm-up modelled).

    One request first warms batch 1; then `batch` 8-token prompts arrive together (the first of them
    starts a batch-1 step, the rest form the first step at `batch`).
    """
    def busy_time(eager: bool) -> float:
        h = Harness(seed=sc.seed)
        argv = sc.argv(max(batch, 4)) + (["--enforce-eager"] if eager else [])
        e = h.add_engine("e", argv)
        step_log = _record_steps(e)
        h.submit("e", RequestSpec(index=-1, arrival_s=1.0, prompt_tokens=8, output_tokens=2, long=False))
        h.run_until(h.start + 10.0)
        n = len(step_log)
        for i in range(batch):
            h.submit("e", RequestSpec(index=i, arrival_s=10.0, prompt_tokens=8, output_tokens=2, long=False))
        h.run_until(h.start + 120.0)
        return sum(s[1] for s in step_log[n:])

    return busy_time(False) - busy_time(True)


def kneedle(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Knee of a concave rising curve (Satopää et al.): the x farthest above the chord of the normalized curve."""
    if len(xs) < 3 or ys[-1] == ys[0] or xs[-1] == xs[0]:
        return math.nan
    best, at = -math.inf, math.nan
    for x, y in zip(xs, ys, strict=True):
        xn = (x - xs[0]) / (xs[-1] - xs[0])
        yn = (y - ys[0]) / (ys[-1] - ys[0])
        if yn - xn > best:
            best, at = yn - xn, x
    return at


def gain_stops(xs: Sequence[float], gains: Sequence[float], threshold: float = 0.05) -> float:
    """The first x from which the gain stays below `threshold`."""
    at = math.nan
    for x, g in reversed(list(zip(xs, gains, strict=True))):
        if g >= threshold:
            break
        at = x
    return at


# ----- the report ----------------------------------------------------------------------------------


def calibrate(sc: Scenario) -> Report:
    """Run every measurement of the scenario and build the table."""
    rep = Report(sc)
    sat = {b: saturate(sc, b) for b in sc.batches}
    base = sat[sc.batches[0]].qps
    rep.details["saturation"] = {str(b): asdict(s) for b, s in sat.items()}
    rep.details["qps_x8"] = {str(b): s.qps * REPLICAS for b, s in sat.items()}
    for b in sc.batches[1:]:
        seed_ratio = SEED_QPS[b] / SEED_QPS[4] if b in SEED_QPS else math.nan
        rep.figures.append(Figure(
            f"throughput_ratio_{b}_4", f"throughput {b} : 4", seed_ratio, sat[b].qps / base,
            note=f"{base * REPLICAS:.1f} / {sat[b].qps * REPLICAS:.1f} QPS x{REPLICAS} replicas; "
                 f"mean running {sat[b].mean_running:.1f}, {sat[b].preemptions} preemptions"))

    lat = {b: latency(sc, b, sc.p99_fraction * sat[b].qps) for b in sc.batches}
    rep.details["latency"] = {str(b): asdict(v) for b, v in lat.items()}
    hi_b = sc.batches[-1]
    lo_b = 8 if 8 in sc.batches and hi_b != 8 else sc.batches[0]
    seed_p99 = SEED_P99_S[16] / SEED_P99_S[8]
    rep.figures.append(Figure(
        f"p99_e2e_ratio_{hi_b}_{lo_b}", f"P99 e2e {hi_b} / {lo_b}", seed_p99, lat[hi_b].e2e_p99 / lat[lo_b].e2e_p99,
        note=f"{lat[lo_b].e2e_p99:.2f} -> {lat[hi_b].e2e_p99:.2f} s at {sc.p99_fraction:.0%} of own saturation"))
    rep.figures.append(Figure(
        f"p99_ttft_ratio_{hi_b}_{lo_b}", f"P99 TTFT {hi_b} / {lo_b}", seed_p99,
        lat[hi_b].ttft_p99 / lat[lo_b].ttft_p99,
        note=f"{lat[lo_b].ttft_p99:.2f} -> {lat[hi_b].ttft_p99:.2f} s"))
    rep.figures.append(Figure(
        f"p99_tpot_ratio_{hi_b}_{lo_b}", f"P99 TPOT {hi_b} / {lo_b}", seed_p99,
        lat[hi_b].tpot_p99 / lat[lo_b].tpot_p99,
        note=f"{lat[lo_b].tpot_p99 * 1e3:.0f} -> {lat[hi_b].tpot_p99 * 1e3:.0f} ms"))

    for b in (8, 16):
        if b in sat:
            rep.figures.append(Figure(f"mem_bw_util_{b}", f"memory-bandwidth util at {b}", SEED_MEM_BW[b],
                                      sat[b].mem_busy, unit="%",
                                      note=f"compute busy {sat[b].compute_busy:.0%}"))

    eff = long_prompt_effect(sc)
    rep.details["long_prompt_effect"] = {**asdict(eff), "increase": eff.increase}
    rep.figures.append(Figure(
        "step_time_4k_increase", "step time, +1 4K prompt", SEED_4K_INCREASE, eff.increase, unit="%",
        note=f"{eff.base_step_s * 1e3:.1f} -> {eff.with_step_s * 1e3:.1f} ms over {eff.steps} steps "
             f"(batch {sc.step_batch} decoding; {sc.step_output} output tokens)"))

    shares = sc.knee_shares
    small, big = sc.knee_batches
    curves = {b: [sat[b] if s == sc.long_share and b in sat else saturate(sc, b, s) for s in shares]
              for b in (small, big)}
    rep.details["long_share_curve"] = {
        str(b): [{"share": s, "qps": c.qps, "tokens_per_s": c.tokens_per_s, "preemptions": c.preemptions,
                  "mean_running": c.mean_running} for s, c in zip(shares, cs, strict=True)]
        for b, cs in curves.items()}
    tok = [c.tokens_per_s for c in curves[small]]
    rep.figures.append(Figure(
        "long_share_knee_tokens", f"long-share knee, tokens/s at {small}", SEED_LONG_KNEE, kneedle(shares, tok),
        unit="%", note="kneedle; k tok/s " + " ".join(f"{s:.0%}:{t / 1e3:.2f}" for s, t in zip(shares, tok,
                                                                                                 strict=True))))
    gains = [c16.qps / c8.qps - 1.0 for c8, c16 in zip(curves[small], curves[big], strict=True)]
    rep.figures.append(Figure(
        "long_share_knee_gain", f"share where {big} stops beating {small}", SEED_LONG_KNEE,
        gain_stops(shares, gains), unit="%",
        note=f"QPS gain {big}/{small} < 5% from here on; gains " + " ".join(
            f"{s:.0%}:{g:+.0%}" for s, g in zip(shares, gains, strict=True))))

    for b in (4, 16):
        if b in sc.batches:
            extra = cold_start(sc, b)
            rep.figures.append(Figure(f"cold_start_{b}", f"cold start at batch {b}", SEED_COLD_START_S[b],
                                      extra, unit="s", note="one-off kernel warm-up added to the first step at "
                                      "each new batch-size class after a start"))
    return rep


def _fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    if unit == "%":
        return f"{value:.0%}"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.2f}"


def format_table(rep: Report) -> str:
    """The side-by-side table, with the scenario in its header."""
    sc = rep.scenario
    lines = [
        f"sim calibration: preset {sc.preset}, one TP1 replica (seed QPS read as x{REPLICAS} replicas), seed {sc.seed}",
        f"engine: --max-num-seqs {{{', '.join(map(str, sc.batches))}}} {' '.join(sc.engine_args)}",
        f"workload: prompts lognormal(median {sc.prompt_median:g}, sigma {sc.prompt_sigma:g}, cap {sc.prompt_cap}),"
        f" {sc.long_share:.0%} long U({sc.long_min}, {sc.long_max}); outputs lognormal(median {sc.output_median:g},"
        f" sigma {sc.output_sigma:g}); ignore_eos",
        f"method: saturation = {sc.sat_rate_qps:g} QPS offered, window {sc.sat_window_s:g} s after "
        f"{sc.warmup_s:g} s warm-up + {sc.sat_settle_s:g} s; P99 at {sc.p99_fraction:.0%} of own saturation, "
        f"{sc.p99_window_s:g} s window",
        "",
    ]
    head = ("figure", "seed", "sim", "sim/seed", "within 15%", "note")
    rows = [(f.label, _fmt(f.seed, f.unit), _fmt(f.sim, f.unit), _fmt(f.ratio, ""),
             "yes" if f.within else "no", f.note if f.within else f"{f.note}; {_why(f.key)}".strip("; "))
            for f in rep.figures]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5])
    return "\n".join(lines)


def _finite(obj: Any) -> Any:
    """NaN and infinities become null, so the JSON is strict."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    """`doctor sim calibrate [--format text|json] [--seed N] [--quick]`."""
    p = argparse.ArgumentParser(prog="doctor sim calibrate", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="shorter runs and fewer points (a smoke run)")
    ns = p.parse_args(argv)
    sc = replace(QUICK if ns.quick else FULL, seed=ns.seed)
    get_preset(sc.preset)
    rep = calibrate(sc)
    if ns.format == "json":
        json.dump(_finite(rep.as_dict()), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_table(rep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
