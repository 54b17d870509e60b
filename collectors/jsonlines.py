"""An append-only JSON-lines file in the state directory, shared by cron runs and the daemon.

Why not one JSON document rewritten each time (collectors.jsonfile): the daemon at a 1 s interval rewrote the
whole signal history and snapshot store every cycle, ~4 MB of JSON, measured at 300 ms of CPU a cycle. Here a
cycle appends its few lines; the file is rewritten (atomically) only when it holds twice what the caller keeps.
Reads are cached by the file's identity and, when another process only appended, read from where the cache
ends. Writers hold the exclusive `fcntl` lock of collectors.jsonfile (readers the shared one). A line that is
not JSON, or that `decode` rejects, is skipped and said in `problems`; a last line without its newline (a writer
killed mid-line) is ignored, and the next append moves it to `<path>.corrupt`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from collectors.jsonfile import open_private, write_bytes_atomic

T = TypeVar("T")
_SEAL = 64


class JsonLines(Generic[T]):
    """Records of type T, one JSON value per line: `decode(value) -> T` (ValueError, KeyError, TypeError for a
    malformed one) and `encode(record) -> JSON-able`."""

    def __init__(self, path: Path, decode: Callable[[object], T], encode: Callable[[T], object]) -> None:
        self.path = Path(path)
        self.decode = decode
        self.encode = encode
        self.problems: list[str] = []
        self._records: list[T] = []
        self._identity: tuple[int, int] | None = None  # (device, inode) the records were read from
        self._offset = 0  # bytes of complete lines read
        self._seal = b""  # the last bytes before _offset: the file was only appended to if they are still there
        self._torn_at = -1
        self.version = 0  # bumped whenever the records change (callers cache views on it)

    def read(self) -> list[T]:
        """Every record, oldest first (the caller holds the lock)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._identity is not None or self._records:
                self._reset()
            return self._records
        identity = (st.st_dev, st.st_ino)
        if identity != self._identity or st.st_size < self._offset:
            self._reset()
            self._identity = identity
        if st.st_size == self._offset:
            return self._records
        with open(self.path, "rb") as handle:
            handle.seek(self._offset - len(self._seal))
            if handle.read(len(self._seal)) != self._seal:  # replaced by a file that reuses the inode
                self._reset()
                self._identity = identity
                handle.seek(0)
            tail = handle.read()
        end = tail.rfind(b"\n") + 1
        self._take(tail[:end])
        self._advance(self._offset + end, tail[:end])
        if end < len(tail) and self._torn_at != self._offset:  # writers hold the lock: a writer died mid-line
            self._torn_at = self._offset
            self.problems.append(f"{self.path}: its last line is incomplete ({len(tail) - end} bytes): ignored")
        return self._records

    def _advance(self, offset: int, written: bytes) -> None:
        self._seal = (self._seal + written)[-_SEAL:]
        self._offset = offset

    def records(self) -> list[T]:
        """What the last read or write left (no file access)."""
        return self._records

    def append(self, records: Iterable[T]) -> None:
        """Add records at the end (the caller holds the exclusive lock and has called read())."""
        new = list(records)
        if not new:
            return
        data = "".join(json.dumps(self.encode(r), separators=(",", ":"), allow_nan=False) + "\n" for r in new)
        with os.fdopen(open_private(self.path, os.O_RDWR | os.O_APPEND), "a+b") as handle:
            if handle.seek(0, os.SEEK_END) > self._offset:  # a torn last line: kept aside, then cut off
                handle.seek(self._offset)
                torn = handle.read()
                keep = self.path.with_name(self.path.name + ".corrupt")
                with os.fdopen(open_private(keep, os.O_WRONLY | os.O_APPEND), "ab") as aside:
                    aside.write(torn + b"\n")
                self.problems.append(f"{self.path}: an incomplete last line ({len(torn)} bytes) was moved to {keep}")
                handle.truncate(self._offset)
            raw = data.encode("utf-8")
            handle.write(raw)
            handle.flush()
            st = os.fstat(handle.fileno())
        self._identity = (st.st_dev, st.st_ino)
        self._advance(st.st_size, raw)
        self._records.extend(new)
        self.version += 1

    def rewrite(self, records: Sequence[T]) -> None:
        """Replace the file with exactly these records, atomically (the caller holds the exclusive lock)."""
        raw = "".join(json.dumps(self.encode(r), separators=(",", ":"), allow_nan=False) + "\n"
                      for r in records).encode("utf-8")
        write_bytes_atomic(self.path, raw)
        st = os.stat(self.path)
        self._identity, self._seal = (st.st_dev, st.st_ino), b""
        self._advance(len(raw), raw)
        self._records = list(records)
        self.version += 1

    def _reset(self) -> None:
        self._records, self._identity, self._offset, self._seal = [], None, 0, b""
        self.version += 1

    def _take(self, data: bytes) -> None:
        bad = 0
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                self._records.append(self.decode(json.loads(line)))
            except (ValueError, KeyError, TypeError, AttributeError, IndexError):
                bad += 1
        if bad:
            self.problems.append(f"{self.path}: skipped {bad} unreadable line(s)")
        if data:
            self.version += 1
