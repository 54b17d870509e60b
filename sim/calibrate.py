"""`doctor sim calibrate`: the default preset's behaviour next to the seed article's figures.

A benchmark, not a test. Everything runs in virtual time in the harness and is deterministic for a
seed. The figures (seed article, "8xA100 80G" stress test; see ../shared/reference/sim-model.md §2.5-2.6):

- saturation throughput at max_num_seqs 4 / 8 / 16: 32 / 55 / 61 QPS, i.e. 1 : 1.72 : 1.91;
- P99 latency at 8 and 16: 1.2 s and 3.8 s (ratio 3.17; the seed does not say which latency);
- memory-bandwidth utilization at 8 and 16: 68% and 92%;
- one 4K-token prompt joining a batch lengthens the mean step ("batch") time by 40%;
- throughput as the long-prompt share grows: a knee above 20%;
- cold start (first step at a batch size after start): 1.2 s at 4, 3.8 s at 16; in the sim an eager step pays
  it (`--enforce-eager`, or a step above the CUDA-graph capture sizes), as vLLM captures graphs before serving.

Methods: throughput = completion rate while the queue never empties, over a steady window after a
warm-up; P99 at a fixed fraction of each configuration's own saturation; bandwidth = the engine's
memory-busy time (dcgm DRAM_ACTIVE analogue) over the saturated window; the 4K effect = mean step
time while the 4K request is in the batch versus the same window without it.

This module turns the measurements into the table (`calibrate`, with the knee of a curve) and is the
command (`main`, text or strict JSON); the rest is re-exported, one concern a module:
`sim.calibrate_scenario` (the seed's figures, the scenario), `sim.calibrate_runs` (the measurements)
and `sim.calibrate_report` (the rows and the text table).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from sim.calibrate_report import WHY_NOT, Figure, Report, format_table
from sim.calibrate_runs import (
    Latency,
    Saturation,
    StepEffect,
    StepLog,
    cold_start,
    latency,
    long_prompt_effect,
    saturate,
)
from sim.calibrate_scenario import (
    FULL,
    QUICK,
    REPLICAS,
    SEED_4K_INCREASE,
    SEED_COLD_START_S,
    SEED_LONG_KNEE,
    SEED_MEM_BW,
    SEED_P99_S,
    SEED_QPS,
    TOLERANCE,
    Scenario,
)
from sim.presets import get_preset

__all__ = [
    "FULL",
    "QUICK",
    "REPLICAS",
    "SEED_4K_INCREASE",
    "SEED_COLD_START_S",
    "SEED_LONG_KNEE",
    "SEED_MEM_BW",
    "SEED_P99_S",
    "SEED_QPS",
    "TOLERANCE",
    "WHY_NOT",
    "Figure",
    "Latency",
    "Report",
    "Saturation",
    "Scenario",
    "StepEffect",
    "StepLog",
    "calibrate",
    "cold_start",
    "format_table",
    "gain_stops",
    "kneedle",
    "latency",
    "long_prompt_effect",
    "main",
    "saturate",
]


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
                                      extra, unit="s", note="--enforce-eager: one-off kernel warm-up added to the "
                                      "first eager step at each new batch-size class after a start"))
    return rep


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
