"""The latency heatmap's numbers: requests per latency bucket per time column, from the deltas between successive
reads of a cumulative histogram (bucket bounds as each scrape gave them), with the P50/P99 of every column.

Pure data, no Textual: `tui.widgets.heatmap_view` draws it. Between two reads the histogram may have been reset
(the engine restarted: a cumulative count went down) or changed its bucket layout (a restart with other buckets);
then the newer read's counts are what happened since the restart, the same rule as Prometheus' `rate()`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from collectors.quantiles import histogram_quantile

RESET, LAYOUT = "reset", "layout"


@dataclass(frozen=True)
class Read:
    """One read of one cumulative histogram: when, its upper bounds (ending with +Inf) and cumulative counts."""

    t: float
    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]


@dataclass(frozen=True)
class Delta:
    """Requests per bucket (not cumulative) observed between two reads; `note` is RESET, LAYOUT or ""."""

    start: float
    end: float
    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    note: str = ""


@dataclass(frozen=True)
class Grid:
    """Rows are the newest layout's buckets (low latency first); a column is None where no read covered it."""

    bounds: tuple[float, ...]
    start: float
    column_s: float
    columns: tuple[tuple[float, ...] | None, ...]
    notes: tuple[str, ...]  # per column: RESET, LAYOUT or ""

    def quantile_row(self, column: int, q: float) -> int | None:
        """The row the q-quantile of a column falls in (None: no data or no requests)."""
        counts = self.columns[column]
        if counts is None or sum(counts) <= 0:
            return None
        cumulative, running = [], 0.0
        for c in counts:
            running += c
            cumulative.append(running)
        found = histogram_quantile(q, self.bounds, cumulative)
        return None if found is None else found[1]

    def quantile(self, column: int, q: float) -> float | None:
        counts = self.columns[column]
        if counts is None or sum(counts) <= 0:
            return None
        cumulative, running = [], 0.0
        for c in counts:
            running += c
            cumulative.append(running)
        found = histogram_quantile(q, self.bounds, cumulative)
        return None if found is None else found[0]

    @property
    def peak(self) -> float:
        return max((max(c) for c in self.columns if c), default=0.0)


def parse_reads(raw: Iterable[Any]) -> list[Read]:
    """`[[t, bounds, cumulative], ...]` as the daemon's `/v1/state?histograms=` gives them ("+Inf" a string);
    malformed entries are skipped."""
    out = []
    for entry in raw:
        try:
            t, bounds, cumulative = entry
            b = tuple(math.inf if x == "+Inf" else float(x) for x in bounds)
            c = tuple(float(x) for x in cumulative)
            if len(b) != len(c) or not b:
                continue
            out.append(Read(float(t), b, c))
        except (TypeError, ValueError):
            continue
    return sorted(out, key=lambda r: r.t)


def per_bucket(cumulative: Sequence[float]) -> tuple[float, ...]:
    """Cumulative counts to counts per bucket (a dip, which Prometheus also ignores, counts as 0)."""
    out, below = [], 0.0
    for c in cumulative:
        out.append(max(0.0, c - below))
        below = max(below, c)
    return tuple(out)


def deltas(reads: Sequence[Read]) -> list[Delta]:
    """What each interval between successive reads observed (see the module docstring for resets)."""
    out = []
    for a, b in itertools.pairwise(reads):
        if b.t <= a.t:
            continue
        if a.bounds != b.bounds:
            out.append(Delta(a.t, b.t, b.bounds, per_bucket(b.cumulative), LAYOUT))
        elif any(y < x for x, y in zip(a.cumulative, b.cumulative, strict=True)):
            out.append(Delta(a.t, b.t, b.bounds, per_bucket(b.cumulative), RESET))
        else:
            diff = [y - x for x, y in zip(a.cumulative, b.cumulative, strict=True)]
            out.append(Delta(a.t, b.t, b.bounds, per_bucket(diff), ""))
    return out


def rebin(counts: Sequence[float], bounds: Sequence[float], onto: Sequence[float]) -> tuple[float, ...]:
    """Counts of buckets `bounds` onto the rows `onto`: each bucket goes to the first row whose bound is at or
    above its own (the +Inf bucket to the last row); the total is kept."""
    out = [0.0] * len(onto)
    for n, upper in zip(counts, bounds, strict=True):
        row = next((i for i, o in enumerate(onto) if o >= upper), len(onto) - 1)
        out[row] += n
    return tuple(out)


def grid(reads: Sequence[Read], *, now: float, columns: int, column_s: float) -> Grid | None:
    """The last `columns` columns of `column_s` seconds, the newest holding `now`; each interval's counts go to the
    column its end falls in (intervals are additive). None without two reads."""
    ds = deltas(reads)
    if not ds or columns <= 0 or column_s <= 0:
        return None
    rows = ds[-1].bounds
    # columns on a fixed time grid (not sliding with `now`), so a refresh inside a column draws the same picture
    start = (math.floor(now / column_s) + 1) * column_s - columns * column_s
    cells: list[list[float] | None] = [None] * columns
    notes = [""] * columns
    for d in ds:
        i = math.floor((d.end - start) / column_s)
        if i < 0 or i >= columns:
            continue
        counts = d.counts if d.bounds == rows else rebin(d.counts, d.bounds, rows)
        note = d.note or (LAYOUT if d.bounds != rows else "")
        cell = cells[i]
        if cell is None:
            cells[i] = list(counts)
        else:
            cells[i] = [x + y for x, y in zip(cell, counts, strict=True)]
        notes[i] = notes[i] or note
    return Grid(rows, start, column_s, tuple(tuple(c) if c is not None else None for c in cells), tuple(notes))


def level(count: float, peak: float, levels: int) -> int:
    """0 for no requests, else 1..levels on a log scale up to `peak` (so one slow request still shows)."""
    if count <= 0 or peak <= 0:
        return 0
    if levels <= 1:
        return 1
    return max(1, min(levels, 1 + round((levels - 1) * math.log1p(count) / math.log1p(peak))))


def bound_label(bound: float) -> str:
    """A bucket's upper bound for the row label: 25ms, 1.5s, +Inf."""
    if math.isinf(bound):
        return "+Inf"
    if bound < 1:
        return f"{bound * 1000:g}ms"
    return f"{bound:g}s"


def trimmed(g: Grid, *, margin: int = 1) -> tuple[int, int]:
    """The rows worth showing, [first, last): from the lowest to the highest bucket any column has requests in,
    with `margin` rows either side (all rows when no column has any)."""
    used = [i for col in g.columns if col for i, n in enumerate(col) if n > 0]
    if not used:
        return 0, len(g.bounds)
    return max(0, min(used) - margin), min(len(g.bounds), max(used) + 1 + margin)


def merged(g: Grid, first: int, last: int, max_rows: int) -> Grid:
    """Rows [first, last) in at most `max_rows` rows: neighbouring buckets summed, each merged row labelled with
    the highest bound in it (`trimmed` leaves out only rows without requests)."""
    n = last - first
    if n <= 0 or max_rows <= 0:
        return g
    size = math.ceil(n / max_rows)
    groups = [(lo, min(last, lo + size)) for lo in range(first, last, size)]
    bounds = tuple(g.bounds[hi - 1] for _, hi in groups)
    cols = tuple(None if c is None else tuple(sum(c[lo:hi]) for lo, hi in groups) for c in g.columns)
    return Grid(bounds, g.start, g.column_s, cols, g.notes)
