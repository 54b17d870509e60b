"""Each engine's /version and /v1/models answers, remembered in the state directory between cron runs.

`identity.json` (0600): {engine: {"url", "read_at", "process_start", "version": {...}, "models": {...}}}.
An entry is used again while it is younger than `ttl_s`, for the same URL, and while the engine's process start
time (`process_start_time_seconds`, from its metrics) is the one it was read under: a restarted engine may run
another release or model, so it is read again. Only answers that succeeded are kept. A file that cannot be read
or is not such a document is ignored with a problem noted (and replaced on the next save), never raised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from collectors.types import Sample
from doctor.state import StateDir

FILE = "identity.json"
KEPT = ("version", "models")  # the identity sources kept (server_info is not read in Prometheus mode)
TTL_S = 3600.0


class IdentityStore:
    """Remembered identity answers; `problems` says what was wrong with the file, if anything."""

    def __init__(self, state: StateDir, *, ttl_s: float = TTL_S) -> None:
        self.state = state
        self.ttl_s = ttl_s
        self.problems: list[str] = []
        self._changed = False
        self.entries: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        path = self.state.path / FILE
        try:
            doc = json.loads(self.state.file(FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.problems.append(f"identity store {path}: unreadable ({type(exc).__name__}: {exc}); read again")
            return {}
        if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
            self.problems.append(f"identity store {path}: not a document of engines; read again")
            self._changed = True  # replaced on the next save
            return {}
        return doc

    def recall(self, engine: str, url: str, now: float, *, process_start: float | None = None,
               check_start: bool = True) -> list[Sample] | None:
        """The kept samples (stamped `now`), or None when they are to be read again (absent, expired, another URL,
        or, with `check_start`, a process start time unknown or other than the one they were read under)."""
        entry = self.entries.get(engine)
        if entry is None or entry.get("url") != url:
            return None
        read_at = entry.get("read_at")
        if not isinstance(read_at, int | float) or not 0.0 <= now - read_at < self.ttl_s:
            return None
        if check_start and (process_start is None or entry.get("process_start") != process_start):
            return None
        datas = [entry.get(source) for source in KEPT]
        if not all(isinstance(d, dict) for d in datas):
            return None
        return [Sample(source, engine, now, data=dict(d)) for source, d in zip(KEPT, datas, strict=True)
                if isinstance(d, dict)]

    def keep(self, engine: str, url: str, samples: Sequence[Sample], now: float, process_start: float | None) -> None:
        """Remember the engine's identity answers when every one of them succeeded (else forget it)."""
        got = {s.source: s for s in samples if s.source in KEPT}
        if set(got) != set(KEPT) or any(s.error is not None for s in got.values()) or process_start is None \
                or not math.isfinite(process_start):
            self._changed |= self.entries.pop(engine, None) is not None
            return
        self.entries[engine] = {"url": url, "read_at": now, "process_start": process_start,
                                **{source: dict(got[source].data) for source in KEPT}}
        self._changed = True

    def save(self) -> None:
        """Write the file when anything changed (a failed write is a problem noted, not raised)."""
        if not self._changed:
            return
        try:
            self.state.save_json(FILE, self.entries)
            self._changed = False
        except OSError as exc:
            self.problems.append(f"identity store {self.state.path / FILE}: cannot write ({exc})")
            self._changed = False


def process_start_of(samples: Sequence[Sample]) -> float | None:
    """The process start time the engine's latest metrics read gives, if any."""
    for sample in reversed(samples):
        if sample.source == "metrics" and sample.metrics is not None:
            value = sample.metrics.gauges.get("process_start_time")
            return value if isinstance(value, float | int) else None
    return None

