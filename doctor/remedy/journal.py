"""The write-ahead intent journal: what the doctor is about to do, written (and fsynced) before it does it.

`journal.jsonl` in the state dir, one JSON object a line:

    {"op": "begin",  "id": ID, "at": unix_s, "record": ActionRecord.to_dict()}
    {"op": "step",   "id": ID, "at": unix_s, "what": "drained hot", "changes": {"inverse": {...}}}
    {"op": "finish", "id": ID, "at": unix_s, "status": "verified", "reason": ""}

A record begun and not finished is what a restarted doctor must reconcile (finish it or roll it back):
`unfinished()`. Each line is written with one write() and fsynced before the call returns, so after a
crash only the last line can be torn; a torn or unreadable line is skipped and reported in `problems`
(a torn `begin` means the action never started: begin is fsynced before acting; a torn `finish` leaves
the record unfinished, and reconciling it again is safe). The next append starts on a fresh line.
The file stays bounded: once it passes `max_bytes`, it is rewritten (atomically) with the unfinished
records and the last `keep_finished` finished ones, each collapsed to a begin (+ finish) line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from collectors.jsonfile import open_private
from doctor.jsonout import dumps
from doctor.remedy.model import ActionRecord, Status
from doctor.state import StateDir

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.jsonl"
STATUSES: frozenset[str] = frozenset(get_args(Status))
_FIELDS = frozenset(ActionRecord.__dataclass_fields__) - {"id"}


class JournalError(Exception):
    """A journal call that does not fit the journal (unknown record, record begun twice, bad status)."""


@dataclass
class JournalState:
    """The journal replayed: every record it knows (current state), which are open, what was unreadable."""

    records: dict[str, ActionRecord] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)  # id -> finish time
    problems: list[str] = field(default_factory=list)

    @property
    def open_ids(self) -> list[str]:
        return [rid for rid in self.records if rid not in self.finished]


class Journal:
    """Append-only, fsynced JSON lines under `state_dir`, safe for several processes (one lock)."""

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time, name: str = JOURNAL_FILE,
                 max_bytes: int = 1 << 20, keep_finished: int = 200) -> None:
        self.state = StateDir(Path(state_dir))
        self.name = name
        self.clock = clock
        self.max_bytes = max_bytes
        self.keep_finished = keep_finished
        self.problems: list[str] = []  # from the last read

    @property
    def path(self) -> Path:
        return self.state.file(self.name)

    # -- writing

    def begin(self, record: ActionRecord) -> None:
        """Write the intent before acting; JournalError when this id was begun already."""
        with self._locked():
            if record.id in self._read().records:
                raise JournalError(f"record {record.id} is already in the journal {self.path}")
            self._append({"op": "begin", "id": record.id, "at": self.clock(), "record": record.to_dict()})

    def step(self, record_id: str, what: str, **changes: Any) -> None:
        """A step done (or about to be done); `changes` update the record's fields (e.g. inverse=...)."""
        bad = sorted(set(changes) - _FIELDS)
        if bad:
            raise JournalError(f"unknown ActionRecord field(s) {', '.join(bad)} (fields: {', '.join(sorted(_FIELDS))})")
        if "status" in changes and changes["status"] not in STATUSES:
            raise JournalError(f"unknown status {changes['status']!r} (statuses: {', '.join(sorted(STATUSES))})")
        with self._locked():
            self._known(record_id)
            entry: dict[str, Any] = {"op": "step", "id": record_id, "at": self.clock(), "what": what}
            if changes:
                entry["changes"] = changes
            self._append(entry)

    def finish(self, record_id: str, status: Status, reason: str = "") -> None:
        """The record is done (finishing twice is a no-op); compacts the file when it has grown past max_bytes."""
        if status not in STATUSES:
            raise JournalError(f"unknown status {status!r} (statuses: {', '.join(sorted(STATUSES))})")
        with self._locked():
            state = self._known(record_id)
            if record_id in state.finished:
                return
            self._append({"op": "finish", "id": record_id, "at": self.clock(), "status": status, "reason": reason})
            if self.path.stat().st_size > self.max_bytes:
                self._compact()

    def compact(self) -> int:
        """Rewrite the journal without old finished records; returns the number of lines dropped."""
        with self._locked():
            return self._compact()

    # -- reading

    def read(self) -> JournalState:
        with self._locked():
            return self._read()

    def unfinished(self) -> list[ActionRecord]:
        """Records begun and not finished, oldest first: what a restarted doctor must reconcile."""
        state = self.read()
        return [state.records[rid] for rid in state.open_ids]

    def finished_ids(self) -> set[str]:
        return set(self.read().finished)

    def get(self, record_id: str) -> ActionRecord | None:
        return self.read().records.get(record_id)

    # -- internals

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self.state.lock(self.name.rsplit(".", 1)[0], wait=True):
            yield

    def _known(self, record_id: str) -> JournalState:
        state = self._read()
        if record_id not in state.records:
            raise JournalError(f"no record {record_id} was begun in the journal {self.path}")
        return state

    def _append(self, entry: Mapping[str, Any]) -> None:
        line = (dumps(entry, sort_keys=True, default=str) + "\n").encode("utf-8")
        path = self.path
        created = not path.exists()
        fd = open_private(path, os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            if size and last_byte(path, size) != b"\n":
                line = b"\n" + line  # a torn line from a crash: start on a fresh line
            write_all(fd, line, size)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(path.parent)

    def _read(self) -> JournalState:
        state = JournalState()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.problems = []
            return state
        lines = raw.split(b"\n")
        for no, chunk in enumerate(lines, 1):
            if not chunk.strip():
                continue
            last = no == len(lines)  # no newline after it: the write was cut short
            try:
                entry = json.loads(chunk)
                _apply(state, entry)
            except (ValueError, TypeError, KeyError) as e:
                kind = "torn last line (a crash mid-write?)" if last else "unreadable line"
                state.problems.append(f"{self.path}:{no}: {kind}, {len(chunk)} bytes, ignored ({type(e).__name__})")
            except JournalError as e:
                state.problems.append(f"{self.path}:{no}: {e}, ignored")
        for problem in state.problems:
            if problem not in self.problems:
                log.warning("journal: %s", problem)
        self.problems = list(state.problems)
        return state

    def _compact(self) -> int:
        state = self._read()
        before = sum(1 for line in self.path.read_bytes().split(b"\n") if line.strip())
        done = sorted(state.finished, key=lambda rid: state.finished[rid])
        keep_done = set(done[-self.keep_finished:]) if self.keep_finished > 0 else set()
        out: list[bytes] = []
        for rid, rec in sorted(state.records.items(), key=lambda kv: kv[1].created_at):
            if rid in state.finished and rid not in keep_done:
                continue
            out.append(_line({"op": "begin", "id": rid, "at": rec.created_at, "record": rec.to_dict()}))
            if rid in state.finished:
                out.append(_line({"op": "finish", "id": rid, "at": state.finished[rid], "status": rec.status,
                                  "reason": rec.reason}))
        tmp = self.path.with_name(f".{self.name}.{os.getpid()}.tmp")
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
            handle.write(b"".join(out))
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.path)
        fsync_dir(self.path.parent)
        return before - len(out)


def _apply(state: JournalState, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    op, rid, at = entry["op"], str(entry["id"]), float(entry["at"])
    if op == "begin":
        state.records[rid] = ActionRecord.from_dict(entry["record"])
        return
    rec = state.records.get(rid)
    if rec is None:
        raise JournalError(f"{op} for record {rid} that was never begun")
    if op == "step":
        for key, value in dict(entry.get("changes") or {}).items():
            if key in _FIELDS:
                setattr(rec, key, value)
        rec.steps = [*rec.steps, str(entry["what"])]
        rec.updated_at = at
    elif op == "finish":
        rec.status = entry["status"]
        rec.reason = str(entry.get("reason") or rec.reason)
        rec.updated_at = at
        state.finished[rid] = at
    else:
        raise ValueError(f"unknown op {op!r}")


def _line(entry: Mapping[str, Any]) -> bytes:
    return (dumps(entry, sort_keys=True, default=str) + "\n").encode("utf-8")


def write_all(fd: int, data: bytes, size: int) -> None:
    """Append all of `data` to `fd` (whose file was `size` bytes long) or raise: write() may take only part of it
    (a file system that fills up takes what fits and says so only on the next call). On an error the file is cut
    back to `size`, so no torn line is left to read as a half-done step."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def last_byte(path: Path, size: int) -> bytes:
    """The file's last byte (a line that does not end in one was torn by a crash mid-write)."""
    with open(path, "rb") as handle:
        handle.seek(size - 1)
        return handle.read(1)


def fsync_dir(path: Path) -> None:
    """Make a new file's directory entry durable (the append-only files of the journal and the alert queue)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
