"""The numbers: a run's client-side view turned into the comparison's metrics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sim.loadgen_summary import percentile as linear_percentile
from trials.efficacy.harness import Outcome, ttft_slo_s
from trials.efficacy.result import RunResult

WINDOW_S = 30.0  # recovery windows (the doctor's cadence)
PEAK_WINDOW_S = 10.0  # peak QPS: the most completions (within SLO, for goodput) in a 10 s window


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100, sim.loadgen_summary.percentile); None for no values."""
    return linear_percentile(values, q) if values else None


def _class_stats(outs: Sequence[Outcome]) -> dict[str, Any]:
    ok = [o for o in outs if o.result == "ok"]
    return {"sent": len(outs), "ok": len(ok), "rejected_413": sum(o.result == "rejected" for o in outs),
            "failed": sum(o.result == "failed" for o in outs),
            "unfinished": sum(o.result == "unfinished" for o in outs),
            "p99_e2e_s": percentile([o.e2e for o in ok if o.e2e is not None], 99),
            "p99_ttft_s": percentile([o.ttft for o in ok if o.ttft is not None], 99),
            "p50_e2e_s": percentile([o.e2e for o in ok if o.e2e is not None], 50),
            "goodput_share": (sum(o.good for o in outs) / len(outs)) if outs else None}


def _windows_ttft(run: RunResult, start_s: float) -> list[tuple[float, float | None]]:
    """(window start, P99 of TTFT over its class's SLO: 1 is on the SLO) of requests sent in each WINDOW_S window
    from start_s; 413s are left out, failed or unfinished requests count as infinitely slow; None for a window
    with no request."""
    out = []
    t = start_s
    while t < run.end_s - 1e-9:
        outs = [o for o in run.outcomes if t <= o.sent - run.t0 < t + WINDOW_S and o.result != "rejected"]
        vals = [o.ttft / ttft_slo_s(o.cls) if o.result == "ok" and o.ttft is not None else math.inf for o in outs]
        out.append((t, percentile(vals, 99)))
        t += WINDOW_S
    return out


def measure(run: RunResult, *, onset_s: float | None = None) -> dict[str, Any]:
    """The comparison's numbers over the incident window: requests sent from the onset to the end of the trace."""
    onset = run.scenario.onset_s if onset_s is None else onset_s
    onset = 0.0 if onset is None else onset
    span = max(run.end_s - onset, 1e-9)
    sent = [o for o in run.outcomes if o.sent - run.t0 >= onset]
    ok_done = [o for o in run.outcomes if o.result == "ok" and o.record is not None and o.record.finished is not None
               and onset <= o.record.finished - run.t0 < run.end_s]
    classes = {"all": _class_stats(sent), "short": _class_stats([o for o in sent if o.cls == "short"]),
               "long": _class_stats([o for o in sent if o.cls == "long"])}
    t_fin = sorted(o.record.finished - run.t0 for o in ok_done if o.record is not None and o.record.finished)
    t_arr = sorted(o.sent - run.t0 for o in sent)
    t_good = sorted(o.record.finished - run.t0 for o in ok_done if o.good and o.record is not None
                    and o.record.finished)
    detect = next((e.t_s for e in run.evaluations if e.t_s >= onset
                   and any(f.severity != "info" for f in e.findings)), None)
    fixed = [a["effective_s"] for a in run.actions if a["effective_s"] is not None and a["effective_s"] >= onset]
    wins = _windows_ttft(run, math.floor(onset / WINDOW_S) * WINDOW_S)
    breach = next((i for i, (_, p) in enumerate(wins) if p is not None and p > 1.0), None)
    recover: float | str | None = "no breach"
    if breach is not None:
        recover = "not recovered"
        for i in range(breach + 1, len(wins) - 1):
            if all(p is None or p <= 1.0 for _, p in wins[i:i + 2]):
                recover = max(0.0, wins[i][0] - onset)
                break
    return {
        "window_s": [onset, run.end_s], "classes": classes,
        "throughput_rps": len(ok_done) / span,
        "output_tokens_per_s": sum(o.record.tokens for o in ok_done if o.record is not None) / span,
        "goodput_rps": sum(o.good for o in sent) / span,
        "peak_qps_served": _peak(t_fin, onset, run.end_s), "peak_qps_offered": _peak(t_arr, onset, run.end_s),
        "peak_goodput_qps": _peak(t_good, onset, run.end_s),
        "capacity_qps": _capacity(run),
        "capacity_qps_short": _capacity(run, "short"),
        "capacity_qps_long": _capacity(run, "long"),
        "time_to_detect_s": None if detect is None else detect - onset,
        "time_to_fix_s": (min(fixed) - onset) if fixed else None,
        "time_to_recover_s": recover,
        "demand_rps": len(sent) / span,
        "goodput_of_demand": (sum(o.good for o in sent) / len(sent)) if sent else None,
        "short_goodput_share_before": _class_stats([o for o in run.outcomes if o.sent - run.t0 < onset
                                                    and o.cls == "short"])["goodput_share"],
        **_cost(run, len(ok_done)),
    }


def _cost(run: RunResult, served: int) -> dict[str, Any]:
    """GPU-seconds per successful request and the spread of the engines' utilisation, over the incident window
    (the seed: $0.0023 -> $0.0014 per request, utilisation 50-90% -> 75-81%)."""
    usage = run.usage
    if not usage:
        return {"gpu_s_per_request": None, "gpu_util_min": None, "gpu_util_max": None}
    util = list(usage.get("util", {}).values())
    return {"gpu_s_per_request": usage["gpu_s"] / served if served else None,
            "gpu_util_min": min(util) if util else None, "gpu_util_max": max(util) if util else None}


def _capacity(run: RunResult, cls: str | None = None) -> float | None:
    """The capacity probe's peak QPS within SLO (of one request class, or all); None when the run had no probe."""
    if not run.probe:
        return None
    times = sorted(o.record.finished for o in run.probe if o.good and o.record is not None and o.record.finished
                   and (cls is None or o.cls == cls))
    return _peak(times, -math.inf, math.inf)


def _peak(times: Sequence[float], start: float, end: float) -> float:
    """The most events in any PEAK_WINDOW_S window (sliding over event times) within [start, end), per second."""
    xs = [t for t in times if start <= t < end]
    best, j = 0, 0
    for i, t in enumerate(xs):
        while xs[j] < t - PEAK_WINDOW_S + 1e-9:
            j += 1
        best = max(best, i - j + 1)
    return best / PEAK_WINDOW_S
