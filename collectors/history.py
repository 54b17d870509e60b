"""A bounded signal history in the state directory, so cron runs can judge `for` durations and baselines.

One JSON line `[t, engine, {signal: value}]` per engine and run (`history.jsonl`, collectors.jsonlines: appended
under an exclusive `fcntl` lock on `<path>.lock`, rewritten atomically with only what is kept once it holds twice
that; readers take a shared lock). None and non-finite values are not stored; an unreadable line is skipped and
said. A `history.json` of the older one-document format is taken over once.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from collectors.jsonfile import locked
from collectors.jsonlines import JsonLines

log = logging.getLogger(__name__)
Entries = dict[str, list[tuple[float, dict[str, float]]]]


Row = tuple[float, str, dict[str, float]]  # timestamp, engine, signals


def _decode(value: object) -> Row:
    if not isinstance(value, list) or len(value) != 3 or not isinstance(value[2], dict):
        raise TypeError("not a [timestamp, engine, {signal: value}] line")
    return float(value[0]), str(value[1]), {str(k): float(v) for k, v in value[2].items()}


def _encode(row: Row) -> list[Any]:
    return [row[0], row[1], row[2]]


class SignalHistory:
    """Per-engine (timestamp, signals) entries, at most `max_entries_per_engine`, none older than `max_age_s`."""

    def __init__(self, path: Path, max_entries_per_engine: int = 1440, max_age_s: float = 86400.0,
                 clock: Callable[[], float] = time.time) -> None:
        if max_entries_per_engine < 1:
            raise ValueError(f"max_entries_per_engine must be at least 1, got {max_entries_per_engine}")
        self.path = Path(path)
        self.max_entries = max_entries_per_engine
        self.max_age_s = max_age_s
        self.clock = clock
        self._lines: JsonLines[Row] = JsonLines(self.path, _decode, _encode)
        # The rows grouped by engine, for the version of the lines they were built from: a cycle's playbooks ask
        # for many series and baselines. Brought up to date with only the rows appended since, while the lines
        # are the same list (regrouping all of a day's rows after each append cost the daemon 0.3 ms a cycle).
        self._grouped: tuple[int, Entries] | None = None
        self._grouped_from: list[Row] | None = None
        self._grouped_count = 0

    @property
    def problems(self) -> list[str]:
        """Messages about unreadable lines or an unreadable file."""
        return self._lines.problems

    def _read(self) -> Entries:
        try:
            self._migrate()
            self._lines.read()
        except OSError as exc:
            message = f"signal history {self.path} cannot be read ({exc}); history starts afresh"
            self.problems.append(message)
            log.warning(message)
            return {}
        if self._grouped is None or self._grouped[0] != self._lines.version:
            records = self._lines.records()
            if self._grouped is not None and records is self._grouped_from and len(records) >= self._grouped_count:
                entries, new = self._grouped[1], records[self._grouped_count:]
            else:
                entries, new = {}, records
            touched: set[str] = set()
            for t, engine, values in new:
                rows = entries.setdefault(engine, [])
                if rows and t < rows[-1][0]:
                    touched.add(engine)  # out of order (another process's clock): sorted below
                rows.append((t, values))
            for engine in touched:
                entries[engine].sort(key=lambda r: r[0])
            self._prune(entries, self.clock())
            self._grouped = (self._lines.version, entries)
            self._grouped_from, self._grouped_count = records, len(records)
        return self._grouped[1]

    def _migrate(self) -> None:
        """History written as one document (`history.json`, the older format) becomes the lines, once."""
        old = self.path.with_suffix(".json")
        if old == self.path or self.path.exists() or not old.exists():
            return
        try:
            doc = json.loads(old.read_text(encoding="utf-8"))
            rows = [(float(t), str(e), {str(k): float(v) for k, v in values.items()})
                    for e, entries in doc["engines"].items() for t, values in entries]
        except (ValueError, KeyError, TypeError, AttributeError, OSError, UnicodeDecodeError) as exc:
            self.problems.append(f"signal history {old} (the older format) could not be read: {exc}; not kept")
            rows = []
        self._lines.rewrite(sorted(rows, key=lambda r: r[0]))
        old.rename(old.with_name(old.name + ".migrated"))

    def _prune(self, entries: Entries, now: float) -> None:
        """Drop, in place, rows older than max_age_s and beyond max_entries (each engine's rows are sorted)."""
        cutoff = now - self.max_age_s
        for engine in list(entries):
            rows = entries[engine]
            start = max(bisect.bisect_left(rows, cutoff, key=lambda r: r[0]), len(rows) - self.max_entries)
            if start >= len(rows):
                del entries[engine]
            elif start > 0:
                del rows[:start]

    def append(self, engine: str, timestamp: float, values: Mapping[str, float | None]) -> None:
        """Record one run's signals for an engine (None and non-finite values are skipped)."""
        self.append_many(timestamp, {engine: values})

    def append_many(self, timestamp: float, by_engine: Mapping[str, Mapping[str, float | None]]) -> None:
        """Record one run's signals for several engines (one line each); the file is rewritten with only what
        is kept once it holds twice that."""
        with locked(self.path, exclusive=True):
            self._read()
            self._lines.append((float(timestamp), engine, {
                k: float(v) for k, v in values.items()
                if v is not None and not isinstance(v, bool) and math.isfinite(float(v))})
                for engine, values in by_engine.items())
            entries = self._read()
            kept = sum(len(rows) for rows in entries.values())
            if len(self._lines.records()) > 2 * kept + 64:
                self._lines.rewrite(sorted(((t, e, v) for e, rows in entries.items() for t, v in rows),
                                           key=lambda r: r[0]))

    def _load(self) -> Entries:
        with locked(self.path, exclusive=False):
            return self._read()

    def series(self, engine: str, signal: str, since_s: float) -> list[tuple[float, float]]:
        """(timestamp, value) of one signal over the last `since_s` seconds, oldest first."""
        return _series(self._load(), self.clock(), engine, signal, since_s)

    def baseline(self, engine: str, signal: str, window_s: float, exclude_recent_s: float = 0.0) -> float | None:
        """Median of a signal over [now - window_s, now - exclude_recent_s); None without data."""
        return _baseline(self._load(), self.clock(), engine, signal, window_s, exclude_recent_s)

    def engines(self) -> list[str]:
        return sorted(self._load())

    def frozen(self) -> FrozenHistory:
        """The history as it is now, read once: for a cycle's many series and baselines (each call here takes the
        file's lock and looks at the file again), and one consistent view while another process appends."""
        entries = self._load()
        return FrozenHistory({engine: list(rows) for engine, rows in entries.items()}, self.clock)


class FrozenHistory:
    """`SignalHistory.frozen()`: the same series and baselines, from the rows read when it was made."""

    def __init__(self, entries: Entries, clock: Callable[[], float]) -> None:
        self._entries = entries
        self.clock = clock

    def series(self, engine: str, signal: str, since_s: float) -> list[tuple[float, float]]:
        return _series(self._entries, self.clock(), engine, signal, since_s)

    def baseline(self, engine: str, signal: str, window_s: float, exclude_recent_s: float = 0.0) -> float | None:
        return _baseline(self._entries, self.clock(), engine, signal, window_s, exclude_recent_s)


def _series(entries: Entries, now: float, engine: str, signal: str, since_s: float) -> list[tuple[float, float]]:
    cutoff = now - since_s
    return [(t, v[signal]) for t, v in entries.get(engine, []) if t >= cutoff and signal in v]


def _baseline(entries: Entries, now: float, engine: str, signal: str, window_s: float,
              exclude_recent_s: float) -> float | None:
    lo, hi = now - window_s, now - exclude_recent_s
    vals = [v[signal] for t, v in entries.get(engine, []) if lo <= t < hi and signal in v]
    return statistics.median(vals) if vals else None
