"""Follow a log like `tail -F` (a file) or a command's output (`journalctl -f`, `docker logs -f`).

Both hand back complete lines (no newline), decoded as UTF-8 with `errors="replace"`. A line longer
than `max_line_bytes` is cut there and ends with `TRUNCATED_MARKER`; the rest of it is dropped as it
arrives, so memory stays within about `max_line_bytes` plus one read chunk whatever the input.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections import deque
from collections.abc import AsyncIterator
from typing import BinaryIO

TRUNCATED_MARKER = " [doctor: line truncated]"
DEFAULT_MAX_LINE = 1 << 20


class LogSourceError(RuntimeError):
    """A log source that cannot be read (missing command, unreadable file)."""


class LineSplitter:
    """Bytes in, complete lines out, with a bounded partial line."""

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        self.max_line_bytes = max_line_bytes
        self._partial = bytearray()
        self._discarding = False  # inside an over-long line already emitted truncated
        self.truncated = 0  # how many lines were cut

    def _decode(self, raw: bytes) -> str:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        return raw.decode("utf-8", "replace")

    def _cut(self, raw: bytes | bytearray) -> str:
        self.truncated += 1
        return bytes(raw[: self.max_line_bytes]).decode("utf-8", "replace") + TRUNCATED_MARKER

    def feed(self, data: bytes) -> list[str]:
        """Lines completed by `data` (an over-long line comes out once, truncated, as soon as it overflows)."""
        out: list[str] = []
        parts = data.split(b"\n")
        tail = parts.pop()
        limit = self.max_line_bytes
        for i, part in enumerate(parts):
            if i == 0:
                if self._discarding:
                    self._discarding = False
                    continue
                if self._partial:
                    self._partial += part
                    part = bytes(self._partial)
                    self._partial.clear()
            out.append(self._decode(part) if len(part) <= limit else self._cut(part))
        if self._discarding:
            return out
        self._partial += tail
        if len(self._partial) > limit:
            out.append(self._cut(self._partial))
            self._partial.clear()
            self._discarding = True
        return out

    def flush(self) -> list[str]:
        """The unterminated last line, if any (at the end of a file that will not grow)."""
        if self._discarding:
            self._discarding = False
            return []
        if not self._partial:
            return []
        line = self._decode(bytes(self._partial))
        self._partial.clear()
        return [line]

    def reset(self) -> None:
        self._partial.clear()
        self._discarding = False

    @property
    def pending_bytes(self) -> int:
        return len(self._partial)


class FileFollower:
    """`tail -F` for one path: call `poll()` for the complete lines written since the last call.

    Survives rotation (a new inode at the path: the rest of the old file is read, then the new one from
    its start), truncation (restart from 0), and the file disappearing (`poll()` returns [], `status`
    says so and one notice is queued; the file is picked up again from its start when it reappears).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        start_at_end: bool = True,
        max_line_bytes: int = DEFAULT_MAX_LINE,
        read_chunk: int = 1 << 16,
        max_poll_bytes: int = 16 << 20,
    ) -> None:
        self.path = os.fspath(path)
        self._chunk = max(1, read_chunk)
        self._max_poll = max(self._chunk, max_poll_bytes)
        self._splitter = LineSplitter(max_line_bytes)
        self._fh: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None
        self._pos = 0
        self._opened_once = False
        self._from_start = not start_at_end  # a file that appears later is read from its start
        self.status: str | None = None  # the current problem, None while reading fine
        self._notices: list[str] = []

    # --- notices ------------------------------------------------------------------------------------
    def _set_status(self, status: str | None) -> None:
        if status != self.status and status is not None:
            self._notices.append(status)
        self.status = status

    def drain_notices(self) -> list[str]:
        """Status changes since the last call (each reported once), e.g. the file disappearing."""
        out, self._notices = self._notices, []
        return out

    @property
    def truncated_lines(self) -> int:
        return self._splitter.truncated

    # --- reading ------------------------------------------------------------------------------------
    def _close(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
        self._fh = None
        self._ident = None

    def close(self) -> None:
        """Release the file handle."""
        self._close()

    def _open(self, from_start: bool) -> bool:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - kept open between polls
        except FileNotFoundError:
            self._set_status(f"log file {self.path} does not exist (waiting for it to appear)")
            return False
        except IsADirectoryError:
            self._set_status(f"log path {self.path} is a directory, not a file")
            return False
        except OSError as exc:
            self._set_status(f"cannot open log file {self.path}: {exc.strerror or exc}")
            return False
        st = os.fstat(fh.fileno())
        self._fh, self._ident = fh, (st.st_dev, st.st_ino)
        self._pos = 0 if from_start else st.st_size
        fh.seek(self._pos)
        self._splitter.reset()
        if self.status is not None:
            self._notices.append(f"log file {self.path} is readable again")
        self.status = None
        self._opened_once = True
        return True

    def _read_available(self, budget: int) -> tuple[list[str], int]:
        assert self._fh is not None
        out: list[str] = []
        while budget > 0:
            try:
                data = self._fh.read(min(self._chunk, budget))
            except OSError as exc:
                self._set_status(f"error reading log file {self.path}: {exc.strerror or exc}")
                self._close()
                break
            if not data:
                break
            self._pos += len(data)
            budget -= len(data)
            out += self._splitter.feed(data)
        return out, budget

    def poll(self) -> list[str]:
        """Complete new lines since the last call (never raises for a missing or unreadable file)."""
        out: list[str] = []
        budget = self._max_poll
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if self._fh is not None and (st is None or (st.st_dev, st.st_ino) != self._ident):
            # Rotated or deleted: finish the old file (as tail -F does), then let go of it.
            lines, budget = self._read_available(budget)
            out += lines + self._splitter.flush()
            self._close()
            if st is None:
                self._set_status(f"log file {self.path} disappeared (waiting for it to reappear)")
                return out
            self._notices.append(f"log file {self.path} was rotated; following the new file")
        if self._fh is None:
            if st is None:
                self._set_status(
                    f"log file {self.path} disappeared (waiting for it to reappear)"
                    if self._opened_once
                    else f"log file {self.path} does not exist (waiting for it to appear)"
                )
                self._from_start = True
                return out
            if not self._open(from_start=self._from_start):
                self._from_start = True
                return out
            self._from_start = True
        fh = self._fh
        assert fh is not None
        size = os.fstat(fh.fileno()).st_size
        if size < self._pos:
            self._notices.append(f"log file {self.path} was truncated; reading from its start")
            self._pos = 0
            fh.seek(0)
            self._splitter.reset()
        lines, _ = self._read_available(budget)
        return out + lines


class CommandFollower:
    """Lines from a long-running command (`journalctl -f -u UNIT -o cat`, `docker logs -f NAME`).

    `async for line in follower.lines()`; when the command cannot start, `lines()` raises
    LogSourceError; when it exits, iteration ends and `error` says how (with its last stderr lines).
    The pipe's back-pressure and the bounded line splitter keep memory bounded.
    """

    def __init__(self, argv: list[str], *, max_line_bytes: int = DEFAULT_MAX_LINE, read_chunk: int = 1 << 16,
                 stderr_lines: int = 20) -> None:
        if not argv:
            raise ValueError("CommandFollower needs a command (argv is empty)")
        self.argv = list(argv)
        self._chunk = max(1, read_chunk)
        self._splitter = LineSplitter(max_line_bytes)
        self._stderr: deque[str] = deque(maxlen=stderr_lines)
        self._proc: asyncio.subprocess.Process | None = None
        self.returncode: int | None = None
        self.error: str | None = None

    @property
    def stderr_tail(self) -> list[str]:
        return list(self._stderr)

    async def _start(self) -> asyncio.subprocess.Process:
        exe = self.argv[0]
        if os.sep not in exe and shutil.which(exe) is None:
            raise LogSourceError(f"cannot run {exe!r}: command not found on PATH")
        try:
            return await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError as exc:
            raise LogSourceError(f"cannot run {exe!r}: command not found") from exc
        except PermissionError as exc:
            raise LogSourceError(f"cannot run {exe!r}: permission denied") from exc
        except OSError as exc:
            raise LogSourceError(f"cannot run {exe!r}: {exc.strerror or exc}") from exc

    async def _pump_stderr(self, stream: asyncio.StreamReader) -> None:
        splitter = LineSplitter(4096)
        while data := await stream.read(self._chunk):
            self._stderr.extend(splitter.feed(data))
        self._stderr.extend(splitter.flush())

    async def lines(self) -> AsyncIterator[str]:
        """Yield the command's stdout lines until it exits (or `stop()` is called)."""
        proc = self._proc = await self._start()
        assert proc.stdout is not None and proc.stderr is not None
        err_task = asyncio.ensure_future(self._pump_stderr(proc.stderr))
        try:
            while data := await proc.stdout.read(self._chunk):
                for line in self._splitter.feed(data):
                    yield line
            for line in self._splitter.flush():
                yield line
            self.returncode = await proc.wait()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(err_task, 5.0)
            tail = "; ".join(line for line in self._stderr if line.strip())[-500:]
            self.error = f"command {' '.join(self.argv)!r} exited with status {self.returncode}" + (
                f": {tail}" if tail else ""
            )
        finally:
            if proc.returncode is None:
                await self._terminate(proc)
            err_task.cancel()

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self.returncode = proc.returncode

    async def stop(self) -> None:
        """Terminate the command we started (SIGTERM, then SIGKILL after 5 s)."""
        if self._proc is not None and self._proc.returncode is None:
            await self._terminate(self._proc)
