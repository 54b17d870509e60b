"""Engine processes on this machine: started detached, recorded under STATE_DIR/engines/, adopted, stopped.

`EngineProcesses` starts a command line detached (own process group, stdin closed, stdout/stderr appended to a
log file with a start mark), keeps a pid file and a JSON record per engine so a later run can adopt what an
earlier one started, and stops an engine's whole process group. It knows nothing of HTTP or the router.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

import psutil

from collectors.jsonfile import open_private, private_dir
from doctor.jsonout import dumps
from doctor.remedy.model import ActuatorError, LaunchedEngine
from doctor.secrets import redact_command

SECRET_ENV = ("ROUTER_POLICY_TOKEN",)  # never handed to an engine process
_PLAIN = re.compile(r"[A-Za-z0-9_.@-]{1,120}")
START_MARK = "=== serving-doctor launcher: starting "


class Process(Protocol):
    pid: int

    def poll(self) -> int | None: ...


Spawner = Callable[[str, Mapping[str, str], Path], Process]


class ProcessTable(Protocol):
    """What the launcher needs of the engine processes it starts: `EngineProcesses` on this machine; a trial in
    virtual time substitutes engines of its simulator (trials.sim_procs)."""

    dir: Path

    def adopt(self) -> list[LaunchedEngine]: ...

    def record_for(self, name: str) -> LaunchedEngine | None: ...

    def start(self, name: str, line: str, *, url: str, port: int, gpus: Sequence[int], args: Mapping[str, Any],
              role: str | None = None) -> LaunchedEngine: ...

    def restart(self, old: LaunchedEngine) -> LaunchedEngine: ...

    async def stop(self, rec: LaunchedEngine) -> None: ...

    def alive(self, rec: LaunchedEngine) -> bool: ...

    def exit_code(self, rec: LaunchedEngine) -> int | None: ...

    def log_tail(self, rec: LaunchedEngine, lines: int = 15) -> str: ...

    def free_port(self, host: str) -> int: ...


def popen_spawn(command: str, env: Mapping[str, str], log: Path) -> Process:
    """Start `command` through sh, detached: a new session (own process group), output appended to `log`."""
    with os.fdopen(open_private(log, os.O_WRONLY | os.O_APPEND), "ab") as out:
        return subprocess.Popen(command, shell=True, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, env=dict(env), close_fds=True)


def file_stem(key: str) -> str:
    """A file name for an engine's key (`name@port`) that stays in its directory whatever the name holds: kept
    when plain, else its unsafe characters replaced and a hash of the whole added (names are free text)."""
    if _PLAIN.fullmatch(key) and not key.startswith("."):
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_.@-]', '_', key)[:80].lstrip('.')}-{digest}"


def _write_private(path: Path, text: str) -> None:
    with os.fdopen(open_private(path, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as out:
        out.write(text)


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


redact = redact_command  # a command line safe to show (doctor.secrets)


class EngineProcesses:
    """The engine processes recorded under `dir` (pid file + JSON record each), started through `spawn`."""

    def __init__(self, dir: Path, *, spawn: Spawner = popen_spawn, env: Mapping[str, str] | None = None,
                 secret_env: Sequence[str] = SECRET_ENV, stop_grace_s: float = 15.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.dir = dir
        self.spawn = spawn
        self.env = dict(env or {})
        self.secret_env = tuple(secret_env)
        self.stop_grace_s = stop_grace_s
        self.sleep = sleep
        self._procs: dict[int, Process] = {}  # children of this process (polled, so none stays a zombie)

    # ----- records -------------------------------------------------------------------------------

    def _files(self, key: str) -> tuple[Path, Path]:
        stem = file_stem(key)
        return self.dir / f"{stem}.pid", self.dir / f"{stem}.json"

    def _save(self, rec: LaunchedEngine) -> None:
        private_dir(self.dir)
        pid_file, meta = self._files(rec.key)
        tmp = meta.with_suffix(".tmp")
        _write_private(tmp, dumps(asdict(rec), sort_keys=True))  # the command line may hold an --api-key
        tmp.replace(meta)
        _write_private(pid_file, f"{rec.pid}\n")

    def _forget(self, rec: LaunchedEngine) -> None:
        for path in self._files(rec.key):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def alive(self, rec: LaunchedEngine) -> bool:
        proc = self._procs.get(rec.pid)
        if proc is not None:
            return proc.poll() is None
        try:
            p = psutil.Process(rec.pid)
            return p.status() != psutil.STATUS_ZOMBIE and (
                rec.create_time is None or abs(p.create_time() - rec.create_time) < 1.0)
        except psutil.Error:
            return False

    def exit_code(self, rec: LaunchedEngine) -> int | None:
        """The exit status of an engine this process started, None while it runs or when it is not our child."""
        proc = self._procs.get(rec.pid)
        return proc.poll() if proc is not None else None

    def adopt(self) -> list[LaunchedEngine]:
        """Engines started earlier (pid files): alive ones are returned, dead ones' files removed."""
        out: list[LaunchedEngine] = []
        for pid_file in sorted(self.dir.glob("*.pid")) if self.dir.is_dir() else []:
            meta = pid_file.with_suffix(".json")
            try:
                data = json.loads(meta.read_text())
                rec = LaunchedEngine(**{**data, "gpus": tuple(data.get("gpus", ()))})
            except (OSError, ValueError, TypeError):
                rec = None
            if rec is None or not self.alive(rec):
                for path in (pid_file, meta):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                continue
            out.append(rec)
        return out

    def record_for(self, name: str) -> LaunchedEngine | None:
        """The live engine process named `name` (the newest when several)."""
        recs = [r for r in self.adopt() if r.name == name]
        return max(recs, key=lambda r: r.started_at) if recs else None

    # ----- processes -----------------------------------------------------------------------------

    def free_port(self, host: str) -> int:
        """A port nothing listens on at `host` now."""
        return free_port(host)

    def start(self, name: str, line: str, *, url: str, port: int, gpus: Sequence[int],
              args: Mapping[str, Any], role: str | None = None) -> LaunchedEngine:
        """Start `line` on `gpus` and record it; ActuatorError when it cannot be started."""
        private_dir(self.dir)
        log = self.dir / f"{file_stem(f'{name}@{port}')}.log"
        try:
            proc = self._spawn(line, gpus, log)
        except OSError as exc:
            raise ActuatorError(f"{name}: the launcher command could not be started: {exc}") from None
        self._procs[proc.pid] = proc
        try:
            ctime: float | None = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            ctime = None
        rec = LaunchedEngine(name, proc.pid, port, url, tuple(gpus), line, str(log), dict(args), time.time(), ctime,
                             role=role)
        self._save(rec)
        return rec

    def restart(self, old: LaunchedEngine) -> LaunchedEngine:
        """Start a stopped engine's command again, same GPUs and log; OSError when it cannot be started."""
        proc = self._spawn(old.command, old.gpus, Path(old.log))
        self._procs[proc.pid] = proc
        rec = replace(old, pid=proc.pid, started_at=time.time(), create_time=None)
        self._save(rec)
        return rec

    def _spawn(self, line: str, gpus: Sequence[int], log: Path) -> Process:
        """Start one command line; the log gets a start mark so its tail shows only this start."""
        env = {k: v for k, v in {**os.environ, **self.env}.items() if k not in self.secret_env}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        with os.fdopen(open_private(log, os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8") as out:
            out.write(f"{START_MARK}{time.strftime('%Y-%m-%dT%H:%M:%S')}: {redact(line)}\n")
        return self.spawn(line, env, log)

    def log_tail(self, rec: LaunchedEngine, lines: int = 15) -> str:
        try:
            text = Path(rec.log).read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        starts = [i for i, t in enumerate(text) if t.startswith(START_MARK)]
        text = text[starts[-1] + 1:] if starts else text
        return "\n".join(text[-lines:]) or "(empty log)"

    def _running(self, rec: LaunchedEngine) -> bool:
        """The engine's leader or any process of its group (the shell's children, vLLM's workers) still runs."""
        if self.alive(rec):
            return True
        for p in psutil.process_iter(["status"]):
            with contextlib.suppress(OSError, psutil.Error):
                if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == rec.pid:
                    return True
        return False

    async def stop(self, rec: LaunchedEngine) -> None:
        """SIGTERM to the engine's process group, SIGKILL after the grace period; its records removed."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._running(rec):
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(rec.pid, sig)
            deadline = time.monotonic() + self.stop_grace_s
            while self._running(rec) and time.monotonic() < deadline:
                await self.sleep(0.05)
        self._procs.pop(rec.pid, None)
        self._forget(rec)
