"""What the engine says of the requests that finished between two reads: per read interval, the deltas of its
per-request histograms (prompt and generation tokens, e2e latency), whose counts per bucket and sums are exact.

vLLM logs no lengths per finished request (its request log, off by default from 0.10, names a request when it
arrives), so these deltas are the finest record of the lengths the engine exposes: at a 5 s read, the ~15 requests
that finished in it, each one's bucket, and their exact mean.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from collectors.types import HistogramData, MetricsSnapshot


@dataclass(frozen=True)
class Bucketed:
    """One histogram's delta over an interval: (lower, upper] bounds, counts per bucket, and the exact mean."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    mean: float

    @property
    def total(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True)
class Finished:
    """The requests that finished between two reads: when (offset from the window's first read, length), and
    their prompt, generation and e2e histograms' deltas."""

    offset: float
    length: float
    prompt: Bucketed
    generation: Bucketed
    e2e: Bucketed


def _delta(a: HistogramData | None, b: HistogramData | None) -> Bucketed | None:
    """b - a as whole counts per bucket; None after a reset, a change of buckets, or a negative count."""
    if b is None:
        return None
    if a is None:
        return None
    if a.bounds != b.bounds:
        return None
    counts, prev = [], 0.0
    for ca, cb in zip(a.cumulative, b.cumulative, strict=True):
        c = cb - ca
        counts.append(round(c - prev))
        prev = c
    n = b.count - a.count
    if n < 0 or min(counts, default=0) < 0:
        return None
    return Bucketed(tuple(b.bounds), tuple(counts), (b.sum - a.sum) / n if n > 0 else 0.0)


def finished_between(chain: Sequence[MetricsSnapshot]) -> tuple[Finished, ...] | None:
    """Each read interval's finished requests; None when any interval cannot say (a histogram missing, a reset,
    counts that disagree): the caller falls back to the window's distributions."""
    if len(chain) < 2:
        return None
    t0 = chain[0].timestamp
    out = []
    for a, b in itertools.pairwise(chain):
        if b.timestamp <= a.timestamp:
            return None
        got = [_delta(a.histograms.get(k), b.histograms.get(k)) for k in ("prompt_len", "generation_len", "e2e")]
        prompt, gen, e2e = got
        if prompt is None or gen is None or e2e is None or not prompt.total == gen.total == e2e.total:
            return None
        out.append(Finished(a.timestamp - t0, b.timestamp - a.timestamp, prompt, gen, e2e))
    return tuple(out)
