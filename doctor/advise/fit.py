"""Calibrating the twin: the step-time scale that makes the twin reproduce the engine's measured window.

One multiplicative factor (the sim's `--time-scale`, on every step and the front end) is fitted by a
secant search in log space on the mean log ratio of predicted to measured mean TTFT, ITL and e2e (exact, from
the histograms' sums); the fit error is then checked on what the advice predicts: P50/P99 TTFT and e2e and
throughput, each
error per metric is |predicted - measured| / measured. Advice is withheld when it is above `MAX_FIT_ERROR`
on any metric or the window holds fewer than the minimum of requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from doctor.advise.twin import Prediction, Settings

MAX_FIT_ERROR = 0.25
FIT_ON = ("mean_ttft_s", "mean_itl_s", "mean_e2e_s")
CHECKED = ("p50_ttft_s", "p99_ttft_s", "p50_e2e_s", "p99_e2e_s", "qps", "generation_tokens_per_s")
SCALE_RANGE = (0.02, 50.0)
TOLERANCE = 0.02  # stop once the mean latencies are within 2% on average (log ratio)

Runner = Callable[[Settings], Prediction]


@dataclass(frozen=True)
class Fit:
    """The fitted settings, the twin's figures at them, and the error per metric."""

    settings: Settings
    predicted: Prediction
    errors: Mapping[str, float | None]
    runs: int
    withheld: str | None  # why advice is withheld (None: the fit is good enough)
    max_error: float = MAX_FIT_ERROR

    @property
    def worst(self) -> float | None:
        known = [e for e in self.errors.values() if e is not None]
        return max(known) if known else None

    def to_dict(self) -> dict[str, object]:
        return {"time_scale": round(self.settings.time_scale, 4), "runs": self.runs,
                "errors": {k: None if v is None else round(v, 4) for k, v in self.errors.items()},
                "worst_error": None if self.worst is None else round(self.worst, 4),
                "max_error": self.max_error, "withheld": self.withheld, "predicted": self.predicted.to_dict()}


def too_few(requests: int, min_requests: int) -> str:
    return (f"the window holds {requests} finished requests, fewer than {min_requests}: too little traffic to fit a "
            "twin (widen --window, --sample longer, or wait for traffic)")


def errors(predicted: Prediction, measured: Prediction) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for m in CHECKED:
        p, q = predicted.get(m), measured.get(m)
        out[m] = None if p is None or q is None or q <= 0 else abs(p - q) / q
    return out


def _log_gap(predicted: Prediction, measured: Prediction, on: tuple[str, ...] = FIT_ON) -> float | None:
    """Mean log(predicted / measured) over `on`: > 0 when the twin is too slow."""
    logs = [math.log(p / q) for m in on
            if (p := predicted.get(m)) is not None and (q := measured.get(m)) is not None and p > 0 and q > 0]
    return sum(logs) / len(logs) if logs else None


def fit(base: Settings, measured: Prediction, runner: Runner, *, max_runs: int = 7, requests: int,
        min_requests: int, max_error: float = MAX_FIT_ERROR) -> Fit:
    """Search the time scale; keep the run whose figures are nearest the measured ones."""
    tried: list[tuple[float, float, Prediction]] = []  # (log scale, log gap, prediction)

    def attempt(log_s: float) -> float | None:
        lo, hi = (math.log(x) for x in SCALE_RANGE)
        log_s = min(hi, max(lo, log_s))
        p = runner(replace(base, time_scale=math.exp(log_s)))
        gap = _log_gap(p, measured)
        if gap is not None:
            tried.append((log_s, gap, p))
        return gap

    x0 = math.log(base.time_scale)
    g0 = attempt(x0)
    if g0 is None:
        p = runner(base)
        return Fit(base, p, errors(p, measured), 1, "the measured window has no latency figures to fit")
    first = _log_gap(tried[-1][2], measured, ("mean_itl_s",))
    x1 = x0 - (g0 if first is None else first)  # ITL is nearly proportional to the scale (queueing is not)
    g1 = attempt(x1)
    runs = 2
    while runs < max_runs and g1 is not None and abs(g1) > TOLERANCE:
        slope = (g1 - g0) / (x1 - x0) if x1 != x0 else 1.0
        nxt = x1 - g1 / (slope if slope > 0.2 else 1.0)  # secant on the last two (latency rises with the scale)
        below = [t[0] for t in tried if t[1] < 0]
        above = [t[0] for t in tried if t[1] > 0]
        if below and above and not max(below) < nxt < min(above):  # outside the bracket: bisect it
            nxt = (max(below) + min(above)) / 2
        x0, g0, x1 = x1, g1, nxt
        g1 = attempt(x1)
        runs += 1
    best = min(tried, key=lambda t: abs(t[1]))
    settings = replace(base, time_scale=math.exp(best[0]))
    return judged(Fit(settings, best[2], {}, runs, None, max_error), best[2], measured, requests=requests,
                  min_requests=min_requests)


def judged(f: Fit, predicted: Prediction, measured: Prediction, *, requests: int, min_requests: int,
           extra_runs: int = 0) -> Fit:
    """`f` with `predicted` as the twin's figures (e.g. the median of several draws), its errors and verdict."""
    errs = errors(predicted, measured)
    withheld = None
    bad = {k: v for k, v in errs.items() if v is not None and v > f.max_error}
    if requests < min_requests:
        withheld = too_few(requests, min_requests)
    elif bad:
        withheld = ("the twin does not reproduce the engine: fit error above "
                    f"{f.max_error:.0%} on " + ", ".join(f"{k} {v:.0%}" for k, v in bad.items()))
    return replace(f, predicted=predicted, errors=errs, withheld=withheld, runs=f.runs + extra_runs)
