"""One JSON document in the state directory, shared by cron runs and the daemon: read under a shared
`fcntl` lock on `<path>.lock`, rewritten atomically (temp file, fsync, rename) under an exclusive one.
A file that cannot be read or parsed is kept as `<path>.corrupt` and the caller starts afresh.

Everything in the state directory is private whatever the umask: directories 0700 (`private_dir`), files 0600
(`open_private`); the doctor's writers (doctor.state, the journal, the audit log, the alert queue) use these too."""

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

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


def private_dir(path: Path) -> Path:
    """`mkdir -p` whose new directories are 0700 (whatever the umask); the directory itself, when it is ours and
    open to the group or others, is made 0700 too."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=PRIVATE_DIR)
        with contextlib.suppress(OSError):
            os.chmod(d, PRIVATE_DIR)
    st = os.stat(path)
    if st.st_mode & 0o077 and st.st_uid == os.getuid():
        os.chmod(path, PRIVATE_DIR)
    return path


def open_private(path: Path | str, flags: int) -> int:
    """os.open with O_CREAT, the file 0600 whatever the umask (an existing one of ours tightened to it)."""
    fd = os.open(path, flags | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o177 and st.st_uid == os.getuid():
            os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def locked(path: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the document's lock (shared for readers, exclusive for writers)."""
    private_dir(path.parent)
    with os.fdopen(open_private(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_APPEND), "a+") as handle:
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
