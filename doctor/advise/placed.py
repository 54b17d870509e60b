"""The window's finished requests put back where they were: each read interval's observed lengths (its
histograms' deltas, doctor.advise.lengths) at a finish time inside the interval minus an e2e latency from the same
interval's e2e buckets, so the twin replays the lengths the engine served in the order it served them, instead of
lengths redrawn from the window's distribution.

Inside a bucket a value is placed by the window's log-density there (interpolated between the neighbouring buckets
as workload._draw_lengths does) and the interval's values are then scaled (each staying in its
bucket) toward the interval's exact mean. Within an interval the longest outputs are paired with the longest e2e
latencies (decode time dominates e2e); prompts are paired at random.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from doctor.advise.lengths import Bucketed, Finished


@dataclass(frozen=True)
class Placed:
    """One request put back: its arrival (offset in the twin's run) and its lengths."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int


TAIL = 0.05  # density beyond the last non-empty bucket, relative to it


def _spans(bounds: Sequence[float], top: float, floor: float) -> list[tuple[float, float]]:
    """(lower, upper) per bucket, at least `floor`; the +Inf bucket reaches to twice its lower bound (at most top)."""
    spans: list[tuple[float, float]] = []
    lower = 0.0
    for bound in bounds:
        upper = max(lower * 1.0001, min(top, 2.0 * lower)) if math.isinf(bound) else bound
        lo = max(floor, lower)
        spans.append((lo, max(lo, upper)))
        lower = bound
    return spans


def slopes(counts: Sequence[float], spans: Sequence[tuple[float, float]]) -> list[float]:
    """Per bucket, the slope of log-density in log(value) that runs between the geometric means of its and its
    neighbours' densities (over the whole window: each interval holds too few requests to tell a shape)."""
    widths = [math.log(hi / lo) if hi > lo else 0.0 for lo, hi in spans]
    dens = [c / w if w > 0 else 0.0 for c, w in zip(counts, widths, strict=True)]
    out = []
    for i, g in enumerate(dens):
        before = dens[i - 1] if i > 0 and dens[i - 1] > 0 else g * TAIL
        after = dens[i + 1] if i + 1 < len(dens) and dens[i + 1] > 0 else g * TAIL
        out.append(0.5 * math.log(after / before) / widths[i] if widths[i] > 0 and g > 0 else 0.0)
    return out


def inside(h: Bucketed, rng: random.Random, top: float, floor: float, shape: Sequence[float] | None = None
           ) -> list[float]:
    """Exactly `h.counts[i]` values inside bucket i, by the log-density `shape` (slopes; log-uniform without),
    scaled toward the exact mean, each inside its bucket; shuffled."""
    spans = _spans(h.bounds, top, floor)
    which: list[int] = []
    values: list[float] = []
    for i, c in enumerate(h.counts):
        lo, hi = spans[i]
        width = math.log(hi / lo) if hi > lo else 0.0
        k = shape[i] if shape is not None else 0.0
        for _ in range(c):
            u = rng.random()
            t = u * width if abs(k * width) < 1e-9 else math.log1p(u * math.expm1(k * width)) / k
            which.append(i)
            values.append(lo * math.exp(t))
    n = len(values)
    for _ in range(4):  # the sum is exact: move toward it, each value inside its own bucket
        mean = sum(values) / n if n else 0.0
        if mean <= 0 or h.mean <= 0 or abs(mean / h.mean - 1.0) < 0.002:
            break
        f = h.mean / mean
        values = [min(spans[i][1], max(spans[i][0], v * f)) for i, v in zip(which, values, strict=True)]
    order = list(range(n))
    rng.shuffle(order)
    return [values[j] for j in order]


def _shape(hs: Sequence[Bucketed], top: float, floor: float) -> list[float] | None:
    if not hs:
        return None
    counts = [float(sum(col)) for col in zip(*(h.counts for h in hs), strict=True)]
    return slopes(counts, _spans(hs[0].bounds, top, floor))


def place(finished: Sequence[Finished], *, start: float, rng: random.Random, top: int) -> list[Placed]:
    """The finished requests of every interval, arrivals at (finish - e2e) after `start` (never before 0)."""
    out: list[Placed] = []
    fs = [f for f in finished if f.e2e.total]
    same = all(f.prompt.bounds == fs[0].prompt.bounds and f.generation.bounds == fs[0].generation.bounds
               and f.e2e.bounds == fs[0].e2e.bounds for f in fs)
    ps = _shape([f.prompt for f in fs], top, 1.0) if same else None
    gs = _shape([f.generation for f in fs], top, 1.0) if same else None
    es = _shape([f.e2e for f in fs], 3600.0, 1e-3) if same else None
    for f in fs:
        n = f.e2e.total
        prompts = inside(f.prompt, rng, top, 1.0, ps)
        outputs = sorted(inside(f.generation, rng, top, 1.0, gs))
        e2es = sorted(inside(f.e2e, rng, 3600.0, 1e-3, es))
        ends = [start + f.offset + rng.random() * f.length for _ in range(n)]
        for p, o, e, end in zip(prompts, outputs, e2es, ends, strict=True):
            out.append(Placed(max(0.0, end - e), max(1, min(top, math.ceil(p))), max(1, min(top, math.ceil(o)))))
    out.sort(key=lambda r: r.arrival_s)
    return out
