"""One JSON document in the state directory, shared by cron runs and the daemon: read under a shared
`fcntl` lock on `<path>.lock`, rewritten atomically (temp file, fsync, rename) under an exclusive one.
A file that cannot be read or parsed is kept as `<path>.corrupt` and the caller starts afresh."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def locked(path: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the document's lock (shared for readers, exclusive for writers)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_text(path: Path) -> str | None:
    """The file's text; None when it does not exist (OSError and UnicodeDecodeError propagate)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def keep_corrupt(path: Path) -> Path:
    """Copy an unreadable document aside as `<path>.corrupt`; returns that path."""
    keep = path.with_name(path.name + ".corrupt")
    with contextlib.suppress(OSError):
        shutil.copyfile(path, keep)
    return keep


def write_atomic(path: Path, doc: Any) -> None:
    """Replace the document in one rename, never leaving a half-written file."""
    write_bytes_atomic(path, json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace the file's bytes in one rename (temp file, fsync, rename), never leaving a half-written file."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
