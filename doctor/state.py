"""The state directory: small JSON documents written atomically, and locks shared by cron and the daemon."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from collectors.jsonfile import open_private, private_dir
from doctor.jsonout import dumps


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/serving-doctor (or ~/.local/state/serving-doctor)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "serving-doctor"


class LockHeld(Exception):
    """Another doctor process holds the lock."""


class StateDir:
    """Files under one directory (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._made = False

    def file(self, name: str) -> Path:
        """`name` in the directory, which is created (0700) on first use."""
        if not self._made or not self.path.is_dir():
            private_dir(self.path)
            self._made = True
        return self.path / name

    @contextlib.contextmanager
    def lock(self, name: str, *, wait: bool = False) -> Iterator[None]:
        """An exclusive lock on `<name>.lock`; LockHeld (naming the holder's pid) when taken and not waiting."""
        path = self.file(name + ".lock")
        with os.fdopen(open_private(path, os.O_RDWR | os.O_APPEND), "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                raise LockHeld(f"{path} is held by pid {holder}") from None
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle, fcntl.LOCK_UN)

    def load_json(self, name: str, default: Any) -> Any:
        """The document, or `default` when missing or unreadable (an unreadable one is kept as .corrupt)."""
        path = self.file(name)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return default
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                path.replace(path.with_name(path.name + ".corrupt"))
            return default

    def save_json(self, name: str, data: Any) -> None:
        path = self.file(name)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as handle:
                handle.write(dumps(data, sort_keys=True))
            tmp.replace(path)
        except OSError:  # a full or read-only file system: the document stays as it was, no stray copy left
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
