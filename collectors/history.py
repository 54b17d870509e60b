"""A bounded signal history in the state directory, so cron runs can judge `for` durations and baselines.

One JSON document `{"version": 1, "engines": {name: [[t, {signal: value}], ...]}}`, rewritten atomically
(temp file + rename) under an exclusive `fcntl` lock on `<path>.lock`; readers take a shared lock.
None values are not stored. A corrupt file is kept as `<path>.corrupt` and history starts afresh.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from collectors.jsonfile import keep_corrupt, locked, read_text, write_atomic

log = logging.getLogger(__name__)
FORMAT_VERSION = 1
Entries = dict[str, list[tuple[float, dict[str, float]]]]


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
        self.problems: list[str] = []  # messages about a corrupt or unreadable file
        # The last document read or written, by the file's identity (device, inode, size, mtime): a cycle's
        # playbooks ask for many series and baselines, and each used to read and parse the whole file again
        # (measured: the daemon's cycle at a 1 s interval). A file another process rewrote is read afresh.
        self._cached: tuple[tuple[int, int, int, int], Entries] | None = None

    def _identity(self) -> tuple[int, int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _read(self) -> Entries:
        ident = self._identity()
        if ident is not None and self._cached is not None and self._cached[0] == ident:
            return {e: list(rows) for e, rows in self._cached[1].items()}
        entries = self._read_file()
        if ident is not None and self._identity() == ident:
            self._cached = (ident, {e: list(rows) for e, rows in entries.items()})
        return entries

    def _read_file(self) -> Entries:
        try:
            raw = read_text(self.path)
        except (OSError, UnicodeDecodeError) as exc:
            return self._corrupt(f"cannot read: {exc}")
        if raw is None:
            return {}
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"not a version-{FORMAT_VERSION} history document")
            out: Entries = {}
            for engine, rows in doc["engines"].items():
                out[str(engine)] = [(float(t), {str(k): float(v) for k, v in values.items()}) for t, values in rows]
            return out
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return self._corrupt(f"{type(exc).__name__}: {exc}")

    def _corrupt(self, why: str) -> Entries:
        keep = keep_corrupt(self.path)
        message = f"signal history {self.path} is corrupt ({why}); kept a copy as {keep} and started afresh"
        self.problems.append(message)
        log.warning(message)
        return {}

    def _write(self, entries: Entries) -> None:
        doc: dict[str, Any] = {"version": FORMAT_VERSION,
                               "engines": {e: [[t, v] for t, v in rows] for e, rows in entries.items()}}
        write_atomic(self.path, doc)
        ident = self._identity()
        self._cached = (ident, {e: list(rows) for e, rows in entries.items()}) if ident is not None else None

    def _prune(self, entries: Entries, now: float) -> None:
        cutoff = now - self.max_age_s
        for engine in list(entries):
            rows = [r for r in entries[engine] if r[0] >= cutoff][-self.max_entries:]
            if rows:
                entries[engine] = rows
            else:
                del entries[engine]

    def append(self, engine: str, timestamp: float, values: Mapping[str, float | None]) -> None:
        """Record one run's signals for an engine (None and non-finite values are skipped)."""
        self.append_many(timestamp, {engine: values})

    def append_many(self, timestamp: float, by_engine: Mapping[str, Mapping[str, float | None]]) -> None:
        """Record one run's signals for several engines in one rewrite of the file."""
        with locked(self.path, exclusive=True):
            entries = self._read()
            for engine, values in by_engine.items():
                kept = {k: float(v) for k, v in values.items()
                        if v is not None and not isinstance(v, bool) and math.isfinite(float(v))}
                rows = entries.setdefault(engine, [])
                rows.append((float(timestamp), kept))
                rows.sort(key=lambda r: r[0])
            self._prune(entries, max(self.clock(), timestamp))
            self._write(entries)

    def _load(self) -> Entries:
        with locked(self.path, exclusive=False):
            return self._read()

    def series(self, engine: str, signal: str, since_s: float) -> list[tuple[float, float]]:
        """(timestamp, value) of one signal over the last `since_s` seconds, oldest first."""
        cutoff = self.clock() - since_s
        return [(t, v[signal]) for t, v in self._load().get(engine, []) if t >= cutoff and signal in v]

    def baseline(self, engine: str, signal: str, window_s: float, exclude_recent_s: float = 0.0) -> float | None:
        """Median of a signal over [now - window_s, now - exclude_recent_s); None without data."""
        now = self.clock()
        lo, hi = now - window_s, now - exclude_recent_s
        vals = [v[signal] for t, v in self._load().get(engine, []) if lo <= t < hi and signal in v]
        return statistics.median(vals) if vals else None

    def engines(self) -> list[str]:
        return sorted(self._load())
