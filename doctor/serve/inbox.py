"""The durable alert queue: every accepted alert is on disk (written and fsynced) before the webhook answers 2xx.

`alerts-queue.jsonl` in the state directory, one JSON object a line:

    {"op": "put",  "key": K, "at": unix_s, "alert": Alert.to_dict()}   accepted, to be handled
    {"op": "done", "key": K, "at": unix_s, "outcome": "confirmed"}     handled (the audit log says how)
    {"op": "seen", "key": K, "at": unix_s}                             handled long ago (kept for dedupe)

K is the dedupe key (fingerprint + status + startsAt): Alertmanager repeats a message on retries, on every
group_interval and from HA peers, and a key already seen is answered without being queued again. On start the
file is replayed: what was put and not done is pending again (a daemon killed mid-alert handles it again, and
the guardrails' cooldowns keep that from acting twice). A torn last line (a crash mid-write) is skipped. The file
is rewritten (atomically) when it grows past `compact_lines`, keeping the pending alerts and the newest
`keep_keys` keys; at most `capacity` alerts are pending, a post that would go past it is refused (QueueFull).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.jsonfile import open_private, private_dir
from doctor.jsonout import dumps
from doctor.remedy.journal import fsync_dir as _fsync_dir
from doctor.remedy.journal import last_byte as _last_byte
from doctor.remedy.journal import write_all
from doctor.serve.alerts import Alert

QUEUE_FILE = "alerts-queue.jsonl"


class QueueFull(Exception):
    """Taking these alerts would put more than `capacity` alerts in the queue."""


@dataclass(frozen=True)
class Entry:
    """One accepted alert, in the queue until handled."""

    key: str
    alert: Alert
    received_at: float


@dataclass(frozen=True)
class Offered:
    """What one post added: the new entries, and how many of its alerts were already known."""

    accepted: tuple[Entry, ...]
    duplicates: int


class Inbox:
    """The queue file and its replayed state; offer/done/compact are serialised by a lock (threads may call)."""

    def __init__(self, state_dir: Path, *, capacity: int, clock: Callable[[], float] = time.time,
                 keep_keys: int = 20_000, compact_lines: int = 100_000) -> None:
        self.path = Path(state_dir) / QUEUE_FILE
        self.capacity = capacity
        self.clock = clock
        self.keep_keys = keep_keys
        self.compact_lines = compact_lines
        self.pending: OrderedDict[str, Entry] = OrderedDict()
        self.seen: OrderedDict[str, float] = OrderedDict()  # every key known, oldest first (bounded)
        self.problems: list[str] = []
        self._lines = 0
        self._lock = threading.Lock()
        self._replay()

    @property
    def depth(self) -> int:
        return len(self.pending)

    def offer(self, alerts: Sequence[Alert]) -> Offered:
        """Queue the alerts not seen before, durably; QueueFull (nothing queued) when they do not fit."""
        with self._lock:
            return self._offer(alerts)

    def _offer(self, alerts: Sequence[Alert]) -> Offered:
        new: dict[str, Alert] = {}
        for a in alerts:
            if a.key not in self.seen and a.key not in new:
                new[a.key] = a
        duplicates = len(alerts) - len(new)
        if not new:
            return Offered((), duplicates)
        if len(self.pending) + len(new) > self.capacity:
            raise QueueFull(f"the alert queue holds {len(self.pending)} of {self.capacity} alerts; "
                            f"{len(new)} more do not fit")
        now = self.clock()
        entries = tuple(Entry(k, a, now) for k, a in new.items())
        self._append([{"op": "put", "key": e.key, "at": now, "alert": e.alert.to_dict()} for e in entries])
        for e in entries:
            self.pending[e.key] = e
            self._remember(e.key, now)
        return Offered(entries, duplicates)

    def done(self, key: str, outcome: str) -> None:
        """The alert was handled: it leaves the queue (its key stays known for dedupe)."""
        with self._lock:
            if self.pending.pop(key, None) is None:
                return
            self._append([{"op": "done", "key": key, "at": self.clock(), "outcome": outcome}])
            if self._lines > self.compact_lines:
                self._compact()

    def compact(self) -> None:
        """Rewrite the file with the pending alerts and the newest keys only."""
        with self._lock:
            self._compact()

    def _compact(self) -> None:
        lines = [{"op": "seen", "key": k, "at": t} for k, t in self.seen.items() if k not in self.pending]
        lines += [{"op": "put", "key": e.key, "at": e.received_at, "alert": e.alert.to_dict()}
                  for e in self.pending.values()]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
            handle.write(b"".join(_line(x) for x in lines))
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.path)
        _fsync_dir(self.path.parent)
        self._lines = len(lines)

    # -- internals

    def _remember(self, key: str, at: float) -> None:
        self.seen[key] = at
        self.seen.move_to_end(key)
        while len(self.seen) > self.keep_keys:  # forget the oldest keys, never one still queued
            victim = next((k for k in self.seen if k not in self.pending), None)
            if victim is None:
                break
            del self.seen[victim]

    def _append(self, entries: list[dict[str, Any]]) -> None:
        private_dir(self.path.parent)
        created = not self.path.exists()
        data = b"".join(_line(e) for e in entries)
        fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            if size and _last_byte(self.path, size) != b"\n":
                data = b"\n" + data  # a torn line from a crash: start on a fresh line
            write_all(fd, data, size)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(self.path.parent)
        self._lines += len(entries)

    def _replay(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        chunks = raw.split(b"\n")
        for no, chunk in enumerate(chunks, 1):
            if not chunk.strip():
                continue
            self._lines += 1
            try:
                entry = json.loads(chunk)
                op, key, at = entry["op"], str(entry["key"]), float(entry["at"])
                if op == "put":
                    self.pending[key] = Entry(key, Alert.from_dict(entry["alert"]), at)
                elif op == "done":
                    self.pending.pop(key, None)
                elif op != "seen":
                    raise ValueError(f"unknown op {op!r}")
                self._remember(key, at)
            except (ValueError, TypeError, KeyError) as exc:
                kind = "torn last line (a crash mid-write?)" if no == len(chunks) else "unreadable line"
                self.problems.append(f"{self.path}:{no}: {kind}, ignored ({type(exc).__name__})")


def _line(entry: dict[str, Any]) -> bytes:
    return (dumps(entry, sort_keys=True) + "\n").encode("utf-8")
