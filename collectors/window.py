"""A rolling window of Samples per engine, bounded in count and age (no pandas)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from collectors.types import MetricsSnapshot, Sample


class EngineWindow:
    """Recent Samples of one engine, per source; at most `max_samples` per source, none older than `max_age_s`.

    Age is measured against the newest sample seen (the window's own clock), so it works in virtual time.
    """

    def __init__(self, max_samples: int = 360, max_age_s: float = 3600.0) -> None:
        if max_samples < 2:
            raise ValueError(f"max_samples must be at least 2 (rates need two samples), got {max_samples}")
        if max_age_s <= 0:
            raise ValueError(f"max_age_s must be positive, got {max_age_s}")
        self.max_samples = max_samples
        self.max_age_s = max_age_s
        self._by_source: dict[str, deque[Sample]] = {}
        self._newest = float("-inf")

    def add(self, sample: Sample) -> None:
        """Keep a sample (in timestamp order; an out-of-order one is inserted in place) and prune old ones."""
        q = self._by_source.get(sample.source)
        if q is None:
            q = self._by_source[sample.source] = deque(maxlen=self.max_samples)
        if q and sample.timestamp < q[-1].timestamp:
            items = sorted([*q, sample], key=lambda s: s.timestamp)[-self.max_samples:]
            q.clear()
            q.extend(items)
        else:
            q.append(sample)
        self._newest = max(self._newest, sample.timestamp)
        self._prune()

    def _prune(self) -> None:
        cutoff = self._newest - self.max_age_s
        for q in self._by_source.values():
            while q and q[0].timestamp < cutoff:
                q.popleft()

    def samples(self, source: str) -> list[Sample]:
        """The kept samples of one source, oldest first."""
        return list(self._by_source.get(source, ()))

    def latest(self, source: str) -> Sample | None:
        """The newest sample of a source (failed reads included; check `.error`)."""
        q = self._by_source.get(source)
        return q[-1] if q else None

    def _snapshots(self) -> Iterator[MetricsSnapshot]:
        for s in self._by_source.get("metrics", ()):
            if s.error is None and s.metrics is not None:
                yield s.metrics

    def latest_metrics(self) -> MetricsSnapshot | None:
        """The newest good metrics snapshot."""
        newest = None
        for snap in self._snapshots():
            newest = snap
        return newest

    def metrics_pair(self, window_s: float) -> tuple[MetricsSnapshot, MetricsSnapshot] | None:
        """(oldest snapshot within `window_s` of the newest, newest); None with fewer than two."""
        snaps = list(self._snapshots())
        if len(snaps) < 2:
            return None
        cur = snaps[-1]
        for snap in snaps[:-1]:
            if snap.timestamp >= cur.timestamp - window_s and snap.timestamp < cur.timestamp:
                return snap, cur
        return None

    def __len__(self) -> int:
        return sum(len(q) for q in self._by_source.values())
