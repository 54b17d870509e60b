"""Raw metrics snapshots kept between runs, so every run can judge a window longer than its own reads.

One JSON line per snapshot in the state directory (`snapshots.jsonl`): the engine, the URL it was read at and
one of its recent MetricsSnapshots (counters, gauges, histograms, the info and units the derive step uses; not the
family names, which only the newest read needs). Bounded per engine in count and age; snapshots of an
engine whose URL changed are dropped (another engine, not a restart). Shared by cron runs and the daemon
under the file lock of collectors.jsonfile; an unreadable line is skipped and said.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from collectors.jsonfile import locked
from collectors.jsonlines import JsonLines
from collectors.types import HistogramData, MetricsSnapshot

log = logging.getLogger(__name__)
FORMAT_VERSION = 2  # 2: one JSON line per snapshot (snapshots.jsonl); 1 was one document (snapshots.json)


def _finite(values: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)}


def _bound(x: float) -> float | str:
    return "+Inf" if math.isinf(x) else x


def snapshot_to_doc(snap: MetricsSnapshot) -> dict[str, Any]:
    """A snapshot as plain JSON (non-finite counters and gauges are left out; +Inf bounds as a string)."""
    return {
        "t": snap.timestamp,
        "c": _finite(snap.counters),
        "g": _finite(snap.gauges),
        "h": {name: [[_bound(b) for b in h.bounds], list(h.cumulative), h.sum, h.count]
              for name, h in snap.histograms.items()
              if all(math.isfinite(x) for x in (*h.cumulative, h.sum, h.count))},
        "i": {k: dict(v) for k, v in snap.info.items()},
        "u": dict(snap.units),
        "s": snap.stats_enabled,
    }


def snapshot_from_doc(doc: Mapping[str, Any]) -> MetricsSnapshot:
    """The inverse of snapshot_to_doc; ValueError/KeyError/TypeError on a malformed entry."""
    hists = {}
    for name, (bounds, cumulative, total, count) in doc["h"].items():
        hists[str(name)] = HistogramData(tuple(math.inf if b == "+Inf" else float(b) for b in bounds),
                                         tuple(float(c) for c in cumulative), float(total), float(count))
    return MetricsSnapshot(
        timestamp=float(doc["t"]),
        counters={str(k): float(v) for k, v in doc["c"].items()},
        gauges={str(k): float(v) for k, v in doc["g"].items()},
        histograms=hists,
        info={str(k): {str(a): str(b) for a, b in v.items()} for k, v in doc.get("i", {}).items()},
        names_seen=frozenset(),
        units={str(k): str(v) for k, v in doc.get("u", {}).items()},
        stats_enabled=bool(doc.get("s", True)),
    )


Record = tuple[str, str, MetricsSnapshot]  # engine, the URL it was read at, the snapshot


def _decode(value: object) -> Record:
    if not isinstance(value, dict) or value.get("v") != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} snapshot line")
    return str(value["e"]), str(value["u"]), snapshot_from_doc(value["s"])


def _encode(record: Record) -> dict[str, Any]:
    return {"v": FORMAT_VERSION, "e": record[0], "u": record[1], "s": snapshot_to_doc(record[2])}


class SnapshotStore:
    """Per-engine raw snapshots: at most `max_per_engine`, none older than `max_age_s` (default 20 minutes:
    a 5-minute window with room for runs that were late), one JSON line each (collectors.jsonlines)."""

    def __init__(self, path: Path, *, max_per_engine: int = 240, max_age_s: float = 1200.0,
                 clock: Callable[[], float] | None = None) -> None:
        if max_per_engine < 2:
            raise ValueError(f"max_per_engine must be at least 2, got {max_per_engine}")
        self.path = Path(path)
        self.max_per_engine = max_per_engine
        self.max_age_s = max_age_s
        self.clock = clock
        self._lines: JsonLines[Record] = JsonLines(self.path, _decode, _encode)
        # Each engine's (URL, snapshots) as the records list says, kept up to date as lines are appended: the daemon
        # asks three times a cycle per engine (freshness, load, save), and walking every engine's lines each time
        # cost it 0.5 ms a cycle with two engines. Rebuilt when the records list is another (a rewrite, another
        # process's compaction) or shorter.
        self._indexed: list[Record] | None = None
        self._indexed_count = 0
        self._by_engine: dict[str, tuple[str, list[MetricsSnapshot]]] = {}
        self._kept_cache: dict[str, tuple[int, int, str | None, list[MetricsSnapshot]]] = {}

    @property
    def problems(self) -> list[str]:
        return self._lines.problems

    def _read(self) -> list[Record]:
        try:
            return self._lines.read()
        except OSError as exc:
            message = f"snapshot store {self.path} cannot be read ({exc}); the window starts afresh"
            self.problems.append(message)
            log.warning(message)
            return []

    def _index(self, records: list[Record]) -> dict[str, tuple[str, list[MetricsSnapshot]]]:
        """Every engine's URL now and its snapshots at that URL in file order (another URL: another engine under
        that name, not a restart), brought up to date with the records appended since the last call."""
        if records is not self._indexed or len(records) < self._indexed_count:
            self._indexed, self._indexed_count, self._by_engine = records, 0, {}
        by_engine = self._by_engine
        for e, u, snap in records[self._indexed_count:]:
            cur = by_engine.get(e)
            if cur is None or cur[0] != u:
                cur = by_engine[e] = (u, [])
            cur[1].append(snap)
        self._indexed_count = len(records)
        return by_engine

    def _kept(self, records: list[Record], engine: str) -> tuple[str | None, list[MetricsSnapshot]]:
        """The engine's URL now and its snapshots at that URL, oldest first, within the bounds."""
        cached = self._kept_cache.get(engine)
        if cached is not None and cached[0] == self._lines.version and cached[1] == len(records) and not self.clock:
            return cached[2], list(cached[3])
        found = self._index(records).get(engine)
        url, snaps = (None, []) if found is None else (found[0], sorted(found[1], key=lambda s: s.timestamp))
        if snaps:
            newest = max([snaps[-1].timestamp] + ([self.clock()] if self.clock else []))
            snaps = [s for s in snaps if s.timestamp >= newest - self.max_age_s][-self.max_per_engine:]
        self._kept_cache[engine] = (self._lines.version, len(records), url, snaps)
        return url, list(snaps)

    def load(self, engine: str, url: str) -> list[MetricsSnapshot]:
        """The kept snapshots of one engine read at `url`, oldest first (bad lines are skipped)."""
        with locked(self.path, exclusive=False):
            current, snaps = self._kept(self._read(), engine)
        return snaps if current == url else []

    def newest(self, engine: str, url: str) -> float | None:
        """When the engine's newest kept snapshot at `url` was taken (None: none kept)."""
        snaps = self.load(engine, url)
        return snaps[-1].timestamp if snaps else None

    def save(self, engine: str, url: str, snapshots: Sequence[MetricsSnapshot]) -> None:
        """Add this run's snapshots of one engine (a new URL replaces the engine's earlier ones); the file is
        rewritten with only what is kept once it holds twice that."""
        with locked(self.path, exclusive=True):
            records = self._read()
            current, kept = self._kept(records, engine)
            seen = {s.timestamp for s in kept} if current == url else set()
            self._lines.append((engine, url, s) for s in snapshots if s.timestamp not in seen)
            records = self._lines.records()
            engines = list(self._index(records))
            if len(records) <= 2 * self.max_per_engine * len(engines) + 64:
                return  # cannot hold twice what is kept yet (the precise count walks every engine's lines)
            live = [(e, u, s) for e in engines for u, snaps in [self._kept(records, e)] if u is not None
                    for s in snaps]
            if len(records) > 2 * len(live) + 64:
                self._lines.rewrite(sorted(live, key=lambda r: r[2].timestamp))
