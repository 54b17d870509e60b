"""The EngineCore process: the engine's busy loop in a child of the API server, as vLLM V1 runs it.

Started by `sim.core_mp` as `python -m sim.core_proc FD`, with FD one end of a socket pair that
carries pickled tuples both ways (`multiprocessing.connection.Connection`). The process titles
itself `VLLM::EngineCore` (vLLM 0.10+ `set_process_title`), claims the GPUs in the node's ledger
under its own pid, writes its own log lines (start-up, the fatal-error traceback) and exits when
its engine dies (after telling the API server) or when the API server goes away.

API server -> core: ("add", spec), ("abort", id), ("call", token, name, args), ("shutdown",).
Core -> API server: ("ready", info) | ("start_failed", text), ("out", [(id, count, reason)]),
("reply", token, value), ("dead", cause).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sim.args import SimOptions
from sim.engine import EngineConfig, EngineCore, EngineStartError
from sim.gpu import FileLedger
from sim.realtime import RealtimeDriver
from sim.request import SimRequest
from sim.runtime import EngineRuntime
from sim.server_info import server_config

EXIT_FATAL = 1  # run_engine_core re-raises after "EngineCore encountered a fatal error."


@dataclass(frozen=True)
class CoreInit:
    """Everything the EngineCore process needs, sent as the first message."""

    config: EngineConfig
    options: SimOptions
    api_pid: int
    port: int
    ledger_path: Path
    started_at: float | None = None  # the API server's process start (the start-up's first lines)


def process_title(profile_name: str) -> str | None:
    """vLLM's title for a single engine (no data parallelism): `VLLM::EngineCore` from 0.10; 0.8 sets none."""
    return None if profile_name == "0.8" else "VLLM::EngineCore"


def set_title(title: str) -> None:
    """The OS process title (ps, psutil's name()), in argv's space only: /proc/PID/environ stays readable."""
    os.environ.setdefault("SPT_NOENV", "1")
    import setproctitle

    setproctitle.setproctitle(title)


class CoreProcess:
    """The child's side: an engine runtime and its real-time driver, fed from the connection."""

    def __init__(self, conn: Connection, runtime: EngineRuntime) -> None:
        self.conn = conn
        self.runtime = runtime
        self.driver = RealtimeDriver(runtime)
        self.requests: dict[str, SimRequest] = {}
        self._outbox: list[tuple[str, int, str | None]] = []
        self._closed = asyncio.Event()
        self._death_sent = False

    @property
    def core(self) -> EngineCore:
        return self.runtime.core

    def _send(self, msg: tuple[Any, ...]) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            self._closed.set()

    def _listener(self, req: SimRequest, new_tokens: int, now: float) -> None:
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append((req.request_id, req.output_count, req.finish_reason))
        if req.finish_reason is not None:
            self.requests.pop(req.request_id, None)

    def _flush(self) -> None:
        out, self._outbox = self._outbox, []
        if out:
            self._send(("out", out))

    def _on_readable(self) -> None:
        try:
            while self.conn.poll():
                self._handle(self.conn.recv())
        except (EOFError, OSError):
            self._closed.set()  # the API server is gone: so is its engine

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind, now = msg[0], time.time()
        if kind == "add":
            rid, prompt, max_tokens, target, arrival, priority, seed = msg[1]
            if target is None:
                target = self.core.sample_output_len()
            req = SimRequest(rid, prompt, max_tokens=max_tokens, target_output=target, arrival_time=arrival,
                             priority=priority, output_seed=seed, listener=self._listener)
            self.requests[rid] = req
            if self.core.dead:
                return
            self.core.add_request(req, now)
        elif kind == "abort":
            self.core.abort_request(msg[1], now)
        elif kind == "call":
            _, token, name, args = msg
            value = self._call(name, args, now)
            self._flush()  # what the call did to requests, then its death if it killed the engine, then the reply
            self._report_death()
            self._send(("reply", token, value))
        elif kind == "shutdown":
            self._closed.set()
        self.driver.notify()

    def _report_death(self) -> None:
        if self.core.dead and not self._death_sent:
            self._death_sent = True
            self._send(("dead", self.core.death_reason))

    def _call(self, name: str, args: tuple[Any, ...], now: float) -> Any:
        core, rt = self.core, self.runtime
        if name == "metrics":
            return core.metrics, core.faults.slow_metrics_s
        if name == "reset_prefix_cache":
            return core.reset_prefix_cache()
        if name == "sleep":
            return rt.sleep(int(args[0]), now)
        if name == "wake_up":
            return rt.wake_up(now)
        if name == "set_hung":
            core.faults.hung = bool(args[0])
            return None
        if name == "fault":
            return rt.apply_fault(args[0], now)
        raise ValueError(f"unknown call {name!r}")

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.conn.fileno(), self._on_readable)
        died = asyncio.Event()
        self.driver.on_death = died.set
        driver = asyncio.ensure_future(self.driver.run())
        closed = asyncio.ensure_future(self._closed.wait())
        dead = asyncio.ensure_future(died.wait())
        await asyncio.wait({driver, closed, dead}, return_when=asyncio.FIRST_COMPLETED)
        self.driver.stop()
        loop.remove_reader(self.conn.fileno())
        self._flush()
        self._report_death()
        code = EXIT_FATAL if self.core.dead else 0
        for task in (driver, closed, dead):
            task.cancel()
        self.core.release_gpus()
        return code


def _start_up(conn: Connection, core: EngineCore, timed: list[tuple[float, list[str]]],
              sink: Callable[[list[str]], None]) -> list[tuple[float, list[str]]] | None:
    """Live through the modelled start-up up to the engine being ready (core.ready_at less the API server's
    `serve` phase), writing each phase's lines as it ends; return the lines after it (the API server's, which
    it writes before it listens), or None when the API server went away meanwhile."""
    engine_ready = core.ready_at - core.startup.serve_s
    mine = [(t, lines) for t, lines in timed if t <= engine_ready]
    for t, lines in mine:
        if conn.poll(max(0.0, t - time.time())):
            try:
                msg = conn.recv()
            except EOFError:
                return None
            if msg[0] == "shutdown":
                return None
        sink(lines)
    return timed[len(mine):]


def run(conn: Connection) -> int:
    """Receive the init message, start the engine (its start-up lines), serve the API server until the end."""
    from sim.linewriter import LineWriter

    init: CoreInit = conn.recv()
    title = process_title(init.options.profile.name)
    if title is not None:
        set_title(title)
    options = init.options
    sink = LineWriter(sys.stdout, options.log_file)
    ledger = FileLedger(init.ledger_path)
    now = init.started_at if init.started_at is not None else time.time()
    core = EngineCore(init.config, options.preset, options.profile, now=now, ledger=ledger,
                      owner=f"{options.host}:{init.port}", faults=options.faults)
    runtime = EngineRuntime(core, sink, host=options.host, port=init.port, dev_mode=options.dev_mode,
                            non_default_args=options.non_default_args, api_pid=init.api_pid, core_pid=os.getpid(),
                            stats_interval_s=options.stats_interval_s, core_process=True)
    try:
        timed = runtime.start(core.started_at)
    except EngineStartError as exc:
        conn.send(("start_failed", str(exc)))
        return EXIT_FATAL
    rest = _start_up(conn, core, timed, sink)
    if rest is None:  # the API server went away (or shut it down) during start-up
        core.release_gpus()
        sink.close()
        return 0
    conn.send(("ready", {"num_gpu_blocks": core.num_gpu_blocks, "started_at": core.started_at,
                         "ready_at": core.ready_at, "timed": rest, "server_config": server_config(runtime)}))
    try:
        return asyncio.run(CoreProcess(conn, runtime).run())
    finally:
        sink.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the API server too; it shuts this process down
    conn = Connection(int(args[0]))
    try:
        return run(conn)
    except (EOFError, KeyboardInterrupt):
        return 0
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
