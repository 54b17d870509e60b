"""Numbers from histogram buckets: Prometheus `histogram_quantile`, a share above a threshold, a spread.

Hand-written rather than numpy or `statistics.quantiles`: these work on cumulative bucket counts (what
/metrics and PromQL give), not on raw observations, and must match Prometheus' interpolation exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from collectors.types import HistogramData


def _fmt(x: float) -> str:
    return f"{x:g}"


def histogram_quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> tuple[float, int] | None:
    """Prometheus histogram_quantile: (value, bucket index) or None without observations.

    Linear interpolation inside the bucket; the first bucket starts at 0 (when its bound is positive);
    a rank in the +Inf bucket returns the highest finite bound (index = the +Inf bucket).
    """
    if len(bounds) < 2 or not cumulative or cumulative[-1] <= 0:
        return None
    fixed: list[float] = []
    running = 0.0
    for c in cumulative:  # Prometheus forces monotonic cumulative counts
        running = max(running, c)
        fixed.append(running)
    total = fixed[-1]
    rank = q * total
    b = 0
    last = len(bounds) - 1
    while b < last and fixed[b] < rank:
        b += 1
    if b == last and math.isinf(bounds[b]):
        return bounds[last - 1], b
    upper = bounds[b]
    if b == 0:
        if upper <= 0:
            return upper, b
        lower, below = 0.0, 0.0
    else:
        lower, below = bounds[b - 1], fixed[b - 1]
    inside = fixed[b] - below
    if inside <= 0:
        return upper, b
    return min(upper, lower + (upper - lower) * (rank - below) / inside), b


def bucket_cv(h: HistogramData) -> tuple[float | None, str]:
    mids: list[float] = []
    counts: list[float] = []
    previous_bound, previous_cum = 0.0, 0.0
    inf_part = False
    for bound, cum in zip(h.bounds, h.cumulative, strict=True):
        n = cum - previous_cum
        if n > 0:
            if math.isinf(bound):
                inf_part = True
                mids.append(previous_bound)
            else:
                mids.append((previous_bound + bound) / 2)
            counts.append(n)
        previous_cum = max(previous_cum, cum)
        if not math.isinf(bound):
            previous_bound = bound
    total = sum(counts)
    first = _fmt(h.bounds[0] * 1000)
    note = (f"estimated from bucket midpoints: bucket resolution limits it (first bound {first} ms; "
            "spread inside a bucket is not seen)")
    if inf_part:
        note += "; +Inf observations counted at the highest bound"
    mean = sum(m * n for m, n in zip(mids, counts, strict=True)) / total
    if mean <= 0:
        return None, note
    var = sum(n * (m - mean) ** 2 for m, n in zip(mids, counts, strict=True)) / total
    return math.sqrt(var) / mean, note


def share_at_or_above(h: HistogramData, threshold: float) -> tuple[float, str]:
    """Share of observations >= threshold, the cumulative count interpolated linearly between bounds."""
    total = h.cumulative[-1]
    previous_bound, previous_cum = 0.0, 0.0
    for bound, cum in zip(h.bounds, h.cumulative, strict=True):
        if math.isinf(bound):
            share = (total - previous_cum) / total
            return share, (f"threshold {_fmt(threshold)} is above the highest bound {_fmt(previous_bound)}: "
                           "upper bound (share above that bound)")
        if threshold <= bound:
            below = previous_cum + (cum - previous_cum) * (threshold - previous_bound) / (bound - previous_bound)
            exact = threshold in (bound, previous_bound)
            how = "at a bucket bound" if exact else (
                f"interpolated linearly inside the ({_fmt(previous_bound)}, {_fmt(bound)}] bucket")
            return max(0.0, (total - below) / total), f"prompts >= {_fmt(threshold)} tokens, {how}"
        previous_bound, previous_cum = bound, cum
    return 0.0, "no buckets"
