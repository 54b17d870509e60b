"""Raw metrics snapshots kept between runs, so every run can judge a window longer than its own reads.

One JSON document in the state directory (`snapshots.json`): per engine, the URL it was read at and its
recent MetricsSnapshots (counters, gauges, histograms, the info and units the derive step uses; not the
family names, which only the newest read needs). Bounded per engine in count and age; snapshots of an
engine whose URL changed are dropped (another engine, not a restart). Shared by cron runs and the daemon
under the file lock of collectors.jsonfile; a corrupt file is kept aside and the window starts afresh.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from collectors.jsonfile import keep_corrupt, locked, read_text, write_atomic
from collectors.types import HistogramData, MetricsSnapshot

log = logging.getLogger(__name__)
FORMAT_VERSION = 1


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


class SnapshotStore:
    """Per-engine raw snapshots: at most `max_per_engine`, none older than `max_age_s` (default 20 minutes:
    a 5-minute window with room for runs that were late)."""

    def __init__(self, path: Path, *, max_per_engine: int = 240, max_age_s: float = 1200.0,
                 clock: Callable[[], float] | None = None) -> None:
        if max_per_engine < 2:
            raise ValueError(f"max_per_engine must be at least 2, got {max_per_engine}")
        self.path = Path(path)
        self.max_per_engine = max_per_engine
        self.max_age_s = max_age_s
        self.clock = clock
        self.problems: list[str] = []

    def _read(self) -> dict[str, Any]:
        try:
            raw = read_text(self.path)
        except (OSError, UnicodeDecodeError) as exc:
            return self._corrupt(f"cannot read: {exc}")
        if raw is None:
            return {}
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or not isinstance(
                    doc.get("engines"), dict):
                raise ValueError(f"not a version-{FORMAT_VERSION} snapshot document")
            return dict(doc["engines"])
        except ValueError as exc:
            return self._corrupt(f"{type(exc).__name__}: {exc}")

    def _corrupt(self, why: str) -> dict[str, Any]:
        keep = keep_corrupt(self.path)
        message = f"snapshot store {self.path} is corrupt ({why}); kept a copy as {keep} and started afresh"
        self.problems.append(message)
        log.warning(message)
        return {}

    def load(self, engine: str, url: str) -> list[MetricsSnapshot]:
        """The kept snapshots of one engine read at `url`, oldest first (bad entries are skipped)."""
        with locked(self.path, exclusive=False):
            entry = self._read().get(engine)
        if not isinstance(entry, dict) or entry.get("url") != url:
            return []
        out = []
        for doc in entry.get("snapshots", []):
            try:
                out.append(snapshot_from_doc(doc))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        return sorted(out, key=lambda s: s.timestamp)

    def save(self, engine: str, url: str, snapshots: Sequence[MetricsSnapshot]) -> None:
        """Add this run's snapshots of one engine and prune (a new URL replaces the engine's entry)."""
        with locked(self.path, exclusive=True):
            engines = self._read()
            entry = engines.get(engine)
            kept: list[dict[str, Any]] = []
            if isinstance(entry, dict) and entry.get("url") == url and isinstance(entry.get("snapshots"), list):
                kept = [d for d in entry["snapshots"] if isinstance(d, dict) and isinstance(d.get("t"), int | float)]
            seen = {float(d["t"]) for d in kept}
            kept += [snapshot_to_doc(s) for s in snapshots if s.timestamp not in seen]
            kept.sort(key=lambda d: float(d["t"]))
            newest = max([float(d["t"]) for d in kept] + ([self.clock()] if self.clock else []))
            kept = [d for d in kept if float(d["t"]) >= newest - self.max_age_s][-self.max_per_engine:]
            engines[engine] = {"url": url, "snapshots": kept}
            write_atomic(self.path, {"version": FORMAT_VERSION, "engines": engines})
