"""Engine processes of the sim harness: the process table the doctor's real launcher (doctor.remedy.launcher.
LocalLauncher) starts, adopts and stops engines through in a trial, in place of processes on this machine.

A command line the launcher built from the engine's template (`vllm serve MODEL ... --port P`) becomes a harness
engine that pays its modelled start-up (connections refused until it is ready) and answers on the trial's
network at the record's URL; its log lines go to the record's log file. An engine whose start fails (no memory
on its GPUs) is a process that exited with status 1, its error in its log, as vLLM's would be.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from doctor.remedy.model import LaunchedEngine
from sim.engine import EngineStartError
from trials.scenario import ScenarioHarness
from trials.sim_io import LogFiles, SimNetwork

FIRST_PORT = 40001
SERVE_PREFIX = ("vllm", "serve")
_HOST_FLAGS = ("--port", "--host")


def serve_line(argv: Sequence[str]) -> str:
    """A launcher template for a sim engine with `vllm serve`-style `argv` ({port} filled in by the launcher)."""
    words = [w.replace("{", "{{").replace("}", "}}") for w in argv]
    return shlex.join([*SERVE_PREFIX, *words]) + " --port {port}"


def engine_argv(line: str) -> list[str]:
    """The engine's arguments from a launcher command line (`vllm serve` and --host/--port dropped)."""
    words = shlex.split(line)
    if tuple(words[:2]) == SERVE_PREFIX:
        words = words[2:]
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w in _HOST_FLAGS:
            skip = True
            continue
        if w.split("=", 1)[0] in _HOST_FLAGS:
            continue
        out.append(w)
    return out


@dataclass
class Lifetime:
    """One engine process: from its start until it was stopped (None: it still runs, or died: see `ended_at`)."""

    record: str  # NAME@PORT
    key: str  # the harness engine
    gpus: int
    started: float
    ended: float | None = None
    busy_at_end: float | None = None  # its engine's stepping time when it was stopped

    def busy_s(self, h: ScenarioHarness) -> float:
        """Seconds its engine spent stepping since it started."""
        if self.busy_at_end is not None:
            return self.busy_at_end
        engine = h.engines.get(self.key)
        return engine.core.busy_s_total if engine is not None else 0.0

    def gpu_seconds(self, h: ScenarioHarness, start: float, end: float) -> float:
        """GPU-seconds it held within [start, end) (a process that died holds nothing from its death)."""
        stop = self.ended if self.ended is not None else h.died_at.get(self.key, end)
        return self.gpus * max(0.0, min(end, stop) - max(start, self.started))


class SimProcesses:
    """Harness engines as launched processes (doctor.remedy.engine_procs.ProcessTable)."""

    def __init__(self, h: ScenarioHarness, net: SimNetwork, logs: LogFiles, directory: Path, *,
                 env_for: Callable[[str], Mapping[str, str]] = lambda name: {}) -> None:
        self.h, self.net, self.logs = h, net, logs
        self.dir = directory
        self.env_for = env_for  # engine name -> its environment (VLLM_SERVER_DEV_MODE, ...)
        self.records: dict[str, LaunchedEngine] = {}  # record key (NAME@PORT) -> record
        self.keys: dict[str, str] = {}  # record key -> harness engine key
        self.failed: dict[str, str] = {}  # record key -> why its start failed (exit status 1)
        self.lifetimes: list[Lifetime] = []  # every process started: what it cost in GPU-seconds
        self._ports = itertools.count(FIRST_PORT)
        self._pids = itertools.count(50001)

    # ----- ProcessTable ------------------------------------------------------------------------

    def free_port(self, host: str) -> int:
        return next(self._ports)

    def start(self, name: str, line: str, *, url: str, port: int, gpus: Sequence[int], args: Mapping[str, Any],
              role: str | None = None) -> LaunchedEngine:
        return self._launch(name, line, url=url, port=port, gpus=gpus, args=args, role=role, starting=True)

    def deploy(self, name: str, line: str, *, url: str, port: int, gpus: Sequence[int], args: Mapping[str, Any],
               role: str | None) -> LaunchedEngine:
        """An engine of the deployment as the trial begins: started by the launcher earlier, up and serving."""
        return self._launch(name, line, url=url, port=port, gpus=gpus, args=args, role=role, starting=False)

    def restart(self, old: LaunchedEngine) -> LaunchedEngine:
        return self.start(old.name, old.command, url=old.url, port=old.port, gpus=old.gpus, args=old.args,
                          role=old.role)

    async def stop(self, rec: LaunchedEngine) -> None:
        """SIGTERM: the engine exits (requests still in it fail), its GPUs are freed, nothing answers its URL."""
        key = self.keys.pop(rec.key, None)
        self.records.pop(rec.key, None)
        for life in self.lifetimes:
            if life.record == rec.key and life.ended is None:
                life.ended = self.h.now
                if key in self.h.engines:
                    life.busy_at_end = self.h.engines[key].core.busy_s_total
        self.failed.pop(rec.key, None)
        if key is not None and key in self.h.engines:
            core = self.h.engines[key].core
            if not core.dead:
                core.kill(self.h.now, "stopped by the launcher (SIGTERM)")
            core.release_gpus()
        if self.net.engine_at(rec.url) == key:
            self.net.unregister(rec.url)

    def alive(self, rec: LaunchedEngine) -> bool:
        key = self.keys.get(rec.key)
        return key is not None and rec.key not in self.failed and not self.h.engines[key].core.dead

    def exit_code(self, rec: LaunchedEngine) -> int | None:
        return None if self.alive(rec) else 1

    def adopt(self) -> list[LaunchedEngine]:
        return [r for r in self.records.values() if self.alive(r)]

    def record_for(self, name: str) -> LaunchedEngine | None:
        recs = [r for r in self.adopt() if r.name == name]
        return max(recs, key=lambda r: r.started_at) if recs else None

    def log_tail(self, rec: LaunchedEngine, lines: int = 15) -> str:
        if rec.key in self.failed:
            return self.failed[rec.key]
        key = self.keys.get(rec.key)
        text = self.h.engines[key].logs if key in self.h.engines else []
        return "\n".join(text[-lines:]) or "(empty log)"

    # ----- the harness side --------------------------------------------------------------------

    def key_of(self, rec: LaunchedEngine) -> str | None:
        """The harness engine a record stands for."""
        return self.keys.get(rec.key)

    def _launch(self, name: str, line: str, *, url: str, port: int, gpus: Sequence[int], args: Mapping[str, Any],
                role: str | None, starting: bool) -> LaunchedEngine:
        old = self.h.engines.get(name)
        key = name if old is None or (old.core.dead and self.net.engine_at(url) in (None, name)) else f"{name}@{port}"
        env = {**self.env_for(name), "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        log = self.dir / f"{name}@{port}.log"
        rec = LaunchedEngine(name, next(self._pids), port, url, tuple(gpus), line, str(log), dict(args),
                             self.h.now, None, role=role)
        self.records[rec.key] = rec
        self.keys[rec.key] = key
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs.paths[key] = log
        try:
            self.h.add_engine(key, engine_argv(line), env=env, starting=starting)
            self.lifetimes.append(Lifetime(rec.key, key, len(gpus), self.h.now if starting else self.h.start))
        except EngineStartError as exc:
            self.failed[rec.key] = f"{name}: {exc}"
            return rec
        self.net.register(url, key, name=name)
        return replace(rec)
