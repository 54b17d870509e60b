"""The logs collector: one-shot scans (`scan_file`) and the public names of the log modules.

* `collectors.logparse`: `parse_line`, `parse_stats`, `strip_ansi` (pure parsing);
* `collectors.logevents`: `recognize` (what a line says happened);
* `collectors.logfollow`: `FileFollower` (`tail -F`), `CommandFollower` (`journalctl -f`, ...).

`scan_file(path, since)` reads a log (its last `max_bytes`) for `doctor diagnose --log hot=PATH`:
timestamped stats lines, events (repeats of one incident collapsed), and counts. A missing or
unreadable file gives a LogScan whose `error` says so; it never raises for bad input.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from collectors.logevents import is_generation_route, recognize
from collectors.logfollow import (
    DEFAULT_MAX_LINE,
    TRUNCATED_MARKER,
    CommandFollower,
    FileFollower,
    LineSplitter,
    LogSourceError,
)
from collectors.logparse import ParsedLine, clock_to_epoch, parse_line, parse_stats, strip_ansi
from collectors.types import Event

__all__ = [
    "TRUNCATED_MARKER", "CommandFollower", "FileFollower", "LineSplitter", "LogScan", "LogSourceError",
    "ParsedLine", "StatsPoint", "parse_line", "parse_stats", "recognize", "scan_file", "strip_ansi",
]

_YEAR_SLACK_S = 2 * 86400.0  # a stamp this far after the file's mtime belongs to the previous year
_COLLAPSE = {"engine_death", "cuda_oom", "startup_oom", "nccl_error", "model_timeout"}
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b: ")


@dataclass(frozen=True)
class StatsPoint:
    """One periodic stats line: its time, canonical values (see parse_stats) and the printing process."""

    timestamp: float | None
    values: dict[str, float]
    process: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp, "values": dict(self.values), "process": self.process}


@dataclass
class LogScan:
    """What one pass over a log file found."""

    path: str
    engine: str
    stats: list[StatsPoint] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    notices: list[str] = field(default_factory=list)
    bytes_read: int = 0
    first_ts: float | None = None
    last_ts: float | None = None

    def latest_stats(self) -> StatsPoint | None:
        return self.stats[-1] if self.stats else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "engine": self.engine, "error": self.error, "notices": list(self.notices),
            "bytes_read": self.bytes_read, "first_ts": self.first_ts, "last_ts": self.last_ts,
            "counts": dict(self.counts), "stats": [s.to_dict() for s in self.stats],
            "events": [e.to_dict() for e in self.events],
        }


class _Scanner:
    """Line-by-line state of a scan (timestamps inherited by raw lines, event collapsing)."""

    def __init__(self, scan: LogScan, since: float | None, year: int, ref: float | None, tz: tzinfo,
                 dedupe_window_s: float) -> None:
        self.scan, self.since, self.year, self.ref, self.tz = scan, since, year, ref, tz
        self.window = dedupe_window_s
        self.counts = scan.counts
        self.last_ts: float | None = None
        self.last_seen: dict[tuple[str, str], float] = {}
        self.cause_for: int | None = None  # index of an engine_death still waiting for its exception line
        self.cause_budget = 0

    def _bump(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def _time(self, p: ParsedLine) -> float | None:
        ts = p.timestamp
        if ts is not None and self.ref is not None and ts > self.ref + _YEAR_SLACK_S and p.ts_text:
            ts = clock_to_epoch(p.ts_text, self.year - 1, self.tz)
        if ts is None:
            return self.last_ts
        self.last_ts = ts
        if self.scan.first_ts is None:
            self.scan.first_ts = ts
        self.scan.last_ts = ts
        return ts

    def line(self, text: str) -> None:
        self._bump("lines")
        p = parse_line(text, year=self.year, tz=self.tz)
        if p is None:
            self._bump("blank")
            return
        ts = self._time(p)
        if self.since is not None and (ts is None or ts < self.since):
            self._bump("before_since")
            return
        self._bump(p.kind)
        if p.kind == "raw" and p.level is None:
            self._bump("unparsed")
        if p.kind == "access":
            self._access(p)
            return
        if p.kind in ("vllm", "json"):
            values = parse_stats(p.message)
            if values is not None:
                self._stats(p, ts, values)
                return
        self._maybe_cause(p)
        ev = recognize(p, self.scan.engine, fallback_ts=ts if ts is not None else 0.0)
        if ev is not None:
            self._event(ev)

    def _access(self, p: ParsedLine) -> None:
        status = p.status or 0
        self._bump(f"http_{status // 100}xx")
        if status == 400 and is_generation_route(p.path):
            self._bump("http_400")

    def _stats(self, p: ParsedLine, ts: float | None, values: dict[str, float]) -> None:
        self._bump("stats_lines")
        stats = self.scan.stats
        partial = not any(k in values for k in ("prompt_tps", "gen_tps", "running", "waiting"))
        if partial and stats and stats[-1].timestamp == ts:  # V0's separate prefix-cache line
            stats[-1].values.update(values)
            return
        stats.append(StatsPoint(ts, values, p.process))

    def _maybe_cause(self, p: ParsedLine) -> None:
        if self.cause_for is None:
            return
        self.cause_budget -= 1
        if self.cause_budget < 0:
            self.cause_for = None
            return
        msg = p.message
        if _EXC_LINE.match(msg) and "EngineDeadError" not in msg:
            ev = self.scan.events[self.cause_for]
            self.scan.events[self.cause_for] = dataclasses.replace(ev, details={**ev.details, "cause": msg[:500]})
            self.cause_for = None

    def _event(self, ev: Event) -> None:
        self._bump(f"events.{ev.kind}")
        if ev.kind in _COLLAPSE:
            sig = str(ev.details.get("signal") or ev.details.get("reason") or "")
            key = (ev.kind, sig if ev.kind != "cuda_oom" else "")
            prev = self.last_seen.get(key)
            self.last_seen[key] = ev.timestamp
            if prev is not None and abs(ev.timestamp - prev) <= self.window:
                return
        self.scan.events.append(ev)
        if ev.kind == "engine_death" and ev.details.get("signal") in ("core_fatal_error", "startup_failed"):
            self.cause_for, self.cause_budget = len(self.scan.events) - 1, 200


def scan_file(
    path: str | os.PathLike[str],
    since: float | None = None,
    *,
    engine: str = "engine",
    year: int | None = None,
    tz: tzinfo = UTC,
    max_bytes: int = 64 << 20,
    max_line_bytes: int = DEFAULT_MAX_LINE,
    read_chunk: int = 1 << 20,
    dedupe_window_s: float = 10.0,
) -> LogScan:
    """Read a log file (its last `max_bytes`) once: stats lines, events and counts.

    `since` (unix seconds) drops lines stamped earlier. vLLM prints no year: `year` defaults to the
    year of the file's modification time, and a stamp more than two days after it counts as the year
    before (a log that crosses New Year). `tz` is the zone the engine host logs in.
    """
    name = os.fspath(path)
    scan = LogScan(path=name, engine=engine)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        scan.error = f"log file {name} does not exist"
        return scan
    except OSError as exc:
        scan.error = f"cannot read log file {name}: {exc.strerror or exc}"
        return scan
    if os.path.isdir(name):
        scan.error = f"log path {name} is a directory, not a file"
        return scan
    ref_year = year if year is not None else datetime.fromtimestamp(st.st_mtime, tz).year
    scanner = _Scanner(scan, since, ref_year, st.st_mtime if year is None else None, tz, dedupe_window_s)
    splitter = LineSplitter(max_line_bytes)
    try:
        with open(name, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - max_bytes) if max_bytes > 0 else 0
            skip_first = start > 0
            if skip_first:
                fh.seek(start)
                scan.notices.append(f"read only the last {size - start} of {size} bytes of {name}")
            while data := fh.read(max(1, read_chunk)):
                scan.bytes_read += len(data)
                lines = splitter.feed(data)
                if skip_first and lines:
                    lines, skip_first = lines[1:], False
                for line in lines:
                    scanner.line(line)
            for line in splitter.flush():
                if not skip_first:
                    scanner.line(line)
    except OSError as exc:
        scan.error = f"error reading log file {name}: {exc.strerror or exc}"
    if splitter.truncated:
        scan.counts["truncated"] = splitter.truncated
        scan.notices.append(f"{splitter.truncated} line(s) longer than {max_line_bytes} bytes were truncated")
    return scan
