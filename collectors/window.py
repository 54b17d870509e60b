"""Windows over an engine's raw metrics snapshots: which snapshot opens a window, what counters and
histograms increased over it, and what its gauges did.

A diagnose run reads an engine twice, `--sample` apart; cron runs keep the raw snapshots in the state
directory (collectors.snapstore), so each run judges `window_s` (60 s by default, like PromQL's
`rate(...[1m])`) instead of the last 5 s. Over a window made of many snapshots:

- counters increase piecewise, snapshot to snapshot, so a reset (an engine restart) inside the window
  counts what was served before it and after it (Prometheus `increase()` semantics);
- histograms add their bucket deltas the same way; a bucket layout change (a restart with other
  buckets) cannot be added across, so only the part after the last change counts, and it says so;
- gauges (running, waiting, KV usage) are judged by their minimum, mean and maximum over every
  snapshot in the window, not by the value at one instant.

The result is a synthetic opening snapshot `base` such that `cur - base` is the window's increase: the
derive step (collectors.derive) then works on (base, cur) exactly as on two reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from collectors.types import HistogramData, MetricsSnapshot

WINDOW_GAUGES: tuple[str, ...] = ("running", "waiting", "kv_cache_usage")
PROGRESS_COUNTERS: tuple[str, ...] = ("generation_tokens",)  # how long each has not moved tells a stall
MAX_AGE_FACTOR = 3.0  # a snapshot older than this many windows is too old to open one (cron stopped for a while)


def _fmt(x: float) -> str:
    return f"{x:g}"


def choose_base(snapshots: Sequence[MetricsSnapshot], cur: MetricsSnapshot, window_s: float, *,
                min_age_s: float = 0.0) -> MetricsSnapshot | None:
    """The snapshot that opens a window of `window_s` ending at `cur`: the one whose age is nearest
    `window_s`, among those at least `min_age_s` and at most MAX_AGE_FACTOR windows old (None if none)."""
    best: MetricsSnapshot | None = None
    for snap in snapshots:
        age = cur.timestamp - snap.timestamp
        if age <= 0 or age < min_age_s or age > MAX_AGE_FACTOR * window_s:
            continue
        if best is None or abs(age - window_s) < abs(cur.timestamp - best.timestamp - window_s):
            best = snap
    return best


@dataclass(frozen=True)
class GaugeStats:
    """One gauge over a window's snapshots."""

    minimum: float
    mean: float
    maximum: float
    reads: int


@dataclass(frozen=True)
class WindowView:
    """A window over snapshots: the synthetic opening snapshot, the closing one, gauge statistics, notes."""

    base: MetricsSnapshot
    cur: MetricsSnapshot
    reads: int  # snapshots in the window, both ends included
    gauges: dict[str, GaugeStats] = field(default_factory=dict)
    resets: tuple[str, ...] = ()  # counter resets and layout changes seen inside the window
    histogram_since: dict[str, float] = field(default_factory=dict)  # histogram -> counted only since this time
    unchanged_s: dict[str, float] = field(default_factory=dict)  # counter -> how long it has not moved (in window)

    @property
    def length_s(self) -> float:
        return self.cur.timestamp - self.base.timestamp


def _counter_increase(chain: Sequence[MetricsSnapshot], key: str, resets: list[str]) -> float | None:
    """Increase of one counter along the chain, reset-aware; None when the closing snapshot lacks it."""
    if key not in chain[-1].counters:
        return None
    total = 0.0
    previous: float | None = None
    for i, snap in enumerate(chain):
        value = snap.counters.get(key)
        if value is None or math.isnan(value):
            continue
        if previous is None:
            if i > 0:
                total += value  # created inside the window: counted from zero
        elif value < previous:
            resets.append(f"{key} {_fmt(previous)} -> {_fmt(value)}")
            total += value
        else:
            total += value - previous
        previous = value
    return total


# (id(a), id(b)) -> (a, b, reset?): the pair is held, so its ids cannot be reused while it is remembered.
_RESETS: dict[tuple[int, int], tuple[HistogramData, HistogramData, bool]] = {}
_RESETS_MAX = 4096  # ~ engines x histograms x reads in a window (2 x 11 x 60 at a 1 s interval)


def _reset_between(previous: HistogramData, h: HistogramData) -> bool:
    """Whether the histogram went back between two reads (a restart): its count or any bucket fell."""
    key = (id(previous), id(h))
    kept = _RESETS.get(key)
    if kept is not None and kept[0] is previous and kept[1] is h:
        return kept[2]
    reset = h.count < previous.count or any(a < b for a, b in zip(h.cumulative, previous.cumulative, strict=True))
    if len(_RESETS) >= _RESETS_MAX:
        _RESETS.clear()
    _RESETS[key] = (previous, h, reset)
    return reset


def _histogram_increase(chain: Sequence[MetricsSnapshot], name: str, resets: list[str]
                        ) -> tuple[HistogramData | None, float | None]:
    """Bucket increases of one histogram along the chain, and the time counting starts from when it is later
    than the window's start (only the snapshots since its last layout change can be added up)."""
    cur = chain[-1].histograms.get(name)
    if cur is None:
        return None, None
    start = len(chain) - 1
    while start > 0 and (h := chain[start - 1].histograms.get(name)) is not None and h.bounds == cur.bounds:
        start -= 1
    since: float | None = None
    if start == 0:
        counts, total_sum, total_count = [0.0] * len(cur.cumulative), 0.0, 0.0
    else:  # created, or re-created with other buckets, after chain[start - 1]: all it holds is new
        first = chain[start].histograms[name]
        counts, total_sum, total_count = list(first.cumulative), first.sum, first.count
        since = chain[start - 1].timestamp
        if name in chain[start - 1].histograms:
            resets.append(f"{name} buckets changed (restart with new bounds): only observations since "
                          f"{_fmt(round(since, 3))} count")
    # Between resets the increases telescope (last - first of each run); at a reset, what the new process holds
    # is all new. Only the reset test is done pair by pair, remembered for the pairs the next cycle sees again.
    opened = previous = chain[start].histograms[name]
    for snap in chain[start + 1:]:
        h = snap.histograms[name]
        if _reset_between(previous, h):
            resets.append(f"{name} count {_fmt(previous.count)} -> {_fmt(h.count)}")
            counts = [c + p - o + n for c, p, o, n in zip(counts, previous.cumulative, opened.cumulative,
                                                           h.cumulative, strict=True)]
            total_sum += previous.sum - opened.sum + h.sum
            total_count += previous.count - opened.count + h.count
            opened = h
        previous = h
    counts = [c + p - o for c, p, o in zip(counts, previous.cumulative, opened.cumulative, strict=True)]
    total_sum += previous.sum - opened.sum
    total_count += previous.count - opened.count
    return HistogramData(cur.bounds, tuple(counts), total_sum, total_count), since


def gauge_stats(chain: Sequence[MetricsSnapshot], names: Sequence[str] = WINDOW_GAUGES) -> dict[str, GaugeStats]:
    """Minimum, mean and maximum of each gauge over the snapshots that have it."""
    out: dict[str, GaugeStats] = {}
    for name in names:
        values = [v for s in chain if s.stats_enabled and (v := s.gauges.get(name)) is not None and math.isfinite(v)]
        if values:
            out[name] = GaugeStats(min(values), sum(values) / len(values), max(values), len(values))
    return out


def window_view(chain: Sequence[MetricsSnapshot]) -> WindowView:
    """The window over `chain` (oldest first, at least two snapshots): `base` is synthetic, so that
    `cur - base` is each counter's and histogram's increase over the whole chain."""
    if len(chain) < 2:
        raise ValueError("a window needs at least two snapshots")
    chain = sorted(chain, key=lambda s: s.timestamp)
    first, cur = chain[0], chain[-1]
    resets: list[str] = []
    counters: dict[str, float] = {}
    for key, value in cur.counters.items():
        inc = _counter_increase(chain, key, resets)
        if inc is not None and not math.isnan(value):
            counters[key] = value - inc
    for key in first.counters.keys() - cur.counters.keys():
        resets.append(f"{key} {_fmt(first.counters[key])} -> absent")
    histograms: dict[str, HistogramData] = {}
    since: dict[str, float] = {}
    for name, h in cur.histograms.items():
        grown, started = _histogram_increase(chain, name, resets)
        if grown is None:
            continue
        if started is not None:
            since[name] = started
        histograms[name] = HistogramData(h.bounds, tuple(c - i for c, i in zip(h.cumulative, grown.cumulative,
                                                                                strict=True)),
                                         h.sum - grown.sum, h.count - grown.count)
    base = MetricsSnapshot(first.timestamp, counters, dict(first.gauges), histograms, dict(first.info),
                           first.names_seen, dict(first.units), first.stats_enabled)
    unchanged = {key: s for key in PROGRESS_COUNTERS if (s := _unchanged_for(chain, key)) is not None}
    return WindowView(base, cur, len(chain), gauge_stats(chain), tuple(dict.fromkeys(resets)), since, unchanged)


def _unchanged_for(chain: Sequence[MetricsSnapshot], key: str) -> float | None:
    """Seconds since the counter last moved, within the chain (the whole chain when it never did)."""
    cur = chain[-1]
    value = cur.counters.get(key)
    if value is None:
        return None
    for snap in reversed(chain[:-1]):
        if snap.counters.get(key) != value:
            break
        cur = snap
    return chain[-1].timestamp - cur.timestamp


def window_chain(snapshots: Sequence[MetricsSnapshot], cur: MetricsSnapshot, window_s: float, *,
                 min_age_s: float = 0.0) -> list[MetricsSnapshot] | None:
    """The snapshots from the chosen opening one to `cur` (oldest first), or None when none can open it."""
    ordered = sorted((s for s in snapshots if s.timestamp < cur.timestamp), key=lambda s: s.timestamp)
    base = choose_base(ordered, cur, window_s, min_age_s=min_age_s)
    if base is None:
        return None
    return [s for s in ordered if s.timestamp >= base.timestamp] + [cur]


def pinned_cap(stats: dict[str, GaugeStats], *, preempting: bool) -> tuple[int, str] | None:
    """A sequence cap seen by observation: running held at one value in every read of the window while
    requests waited in every read and the KV cache was not the limit (no preemption, usage under 90%)."""
    running, waiting = stats.get("running"), stats.get("waiting")
    if running is None or waiting is None or running.reads < 2 or waiting.reads < 2:
        return None
    kv = stats.get("kv_cache_usage")
    if preempting or (kv is not None and kv.maximum >= 0.9):
        return None
    if running.minimum != running.maximum or running.maximum < 1 or waiting.minimum < 1:
        return None
    cap = int(running.maximum)
    return cap, (f"running held at {cap} in all {running.reads} reads while {_fmt(waiting.minimum)}-"
                 f"{_fmt(waiting.maximum)} requests waited and KV had room: a cap of {cap} sequences")
