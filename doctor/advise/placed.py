"""The window's finished requests put back where they were: each read interval's observed lengths (its
histograms' deltas, doctor.advise.lengths) at a finish time inside the interval minus an e2e latency from the same
interval's e2e buckets, so the twin replays the lengths the engine served in the order it served them, instead of
lengths redrawn from the window's distribution.

Inside a bucket a value is placed uniformly in log and the bucket's values are then scaled (each staying in its
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


def inside(h: Bucketed, rng: random.Random, top: float, floor: float) -> list[float]:
    """Exactly `h.counts[i]` values inside bucket i, log-uniform, scaled toward the exact mean (the +Inf bucket
    reaches to twice its lower bound, at most `top`)."""
    spans: list[tuple[float, float]] = []
    lower = 0.0
    for bound in h.bounds:
        upper = max(lower * 1.0001, min(top, 2.0 * lower)) if math.isinf(bound) else bound
        lo = max(floor, lower)
        spans.append((lo, max(lo, upper)))
        lower = bound
    which: list[int] = []
    values: list[float] = []
    for i, c in enumerate(h.counts):
        lo, hi = spans[i]
        for _ in range(c):
            which.append(i)
            values.append(lo * math.exp(rng.random() * math.log(hi / lo)) if hi > lo else lo)
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


def place(finished: Sequence[Finished], *, start: float, rng: random.Random, top: int) -> list[Placed]:
    """The finished requests of every interval, arrivals at (finish - e2e) after `start` (never before 0)."""
    out: list[Placed] = []
    for f in finished:
        n = f.e2e.total
        if n == 0:
            continue
        prompts = inside(f.prompt, rng, top, 1.0)
        outputs = sorted(inside(f.generation, rng, top, 1.0))
        e2es = sorted(inside(f.e2e, rng, 3600.0, 1e-3))
        ends = [start + f.offset + rng.random() * f.length for _ in range(n)]
        for p, o, e, end in zip(prompts, outputs, e2es, ends, strict=True):
            out.append(Placed(max(0.0, end - e), max(1, min(top, math.ceil(p))), max(1, min(top, math.ceil(o)))))
    out.sort(key=lambda r: r.arrival_s)
    return out
