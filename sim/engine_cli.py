"""`doctor sim engine`: run one simulated vLLM engine over HTTP until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from sim import dcgm
from sim.args import EngineArgsError, SimOptions, build_parser, parse_engine_args
from sim.core_client import InprocClient
from sim.core_mp import MPClient
from sim.engine import EngineConfig, EngineCore, EngineStartError
from sim.gpu import FileLedger, GpuLedger, MemoryLedger, default_ledger_path
from sim.linewriter import LineWriter
from sim.logfmt_requests import ignored_flags_line
from sim.realtime import RealtimeDriver
from sim.runtime import EngineRuntime
from sim.server import SimServer

Timed = list[tuple[float, list[str]]]  # start-up lines as (when, lines), see EngineRuntime.start

DEATH_SHUTDOWN_DELAY_S = 5.0  # vLLM's watchdog shuts the API server down a few seconds after engine death


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture: `serve` handles SIGINT/SIGTERM and releases the GPUs."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def bind_socket(host: str, port: int, *, listen: bool = True) -> socket.socket:
    """Listen socket (port 0 = any free port); `listen=False` only binds (vLLM during start-up: refused)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP (not 0) so asyncio sets TCP_NODELAY: otherwise every response waits for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    sock.setblocking(False)
    return sock


@dataclass
class RunningEngine:
    """Handles on a served engine (for tests and the demo)."""

    runtime: EngineRuntime | None  # None when the engine core runs in its own process
    server: SimServer
    uvicorn_servers: list[uvicorn.Server] = field(default_factory=list)
    port: int = 0
    dcgm_port: int | None = None
    core_pid: int | None = None  # the EngineCore process, when there is one

    def stop(self) -> None:
        for s in self.uvicorn_servers:
            s.should_exit = True


def _inproc(config: EngineConfig, options: SimOptions, port: int, ledger: GpuLedger,
            sink: Callable[[list[str]], None], clock: Callable[[], float]) -> tuple[EngineRuntime, Timed]:
    """The engine core in this process (V0, VLLM_ENABLE_V1_MULTIPROCESSING=0, engine threads) and its timed
    start-up lines; EngineStartError when it fails (its lines already written)."""
    core = EngineCore(config, options.preset, options.profile, now=clock(), ledger=ledger,
                      owner=f"{options.host}:{port}", faults=options.faults)
    runtime = EngineRuntime(core, sink, host=options.host, port=port, dev_mode=options.dev_mode,
                            non_default_args=options.non_default_args, stats_interval_s=options.stats_interval_s,
                            core_pid=os.getpid())
    return runtime, runtime.start(core.started_at)


async def serve(config: EngineConfig, options: SimOptions, *, ledger: GpuLedger, sink: Callable[[list[str]], None],
                on_ready: Callable[[RunningEngine], None] | None = None,
                clock: Callable[[], float] = time.time, dcgm_port: int | None = None,
                core_ledger: Path | None = None, env: Mapping[str, str] | None = None) -> int:
    """Start the engine, serve until told to stop; 1 when start-up fails as vLLM's would.

    As `vllm serve`: the port is bound at once but refuses connections until the modelled start-up (sim.startup)
    has passed, its lines written as each phase ends; then the server listens. With `core_ledger` (the node's
    ledger file) the engine core runs in an EngineCore child process that claims its GPUs there, runs the
    engine's phases and writes their lines; the API server writes the rest once the child is ready. Else the
    core runs in this process on `ledger`. `dcgm_port` only names the node's exporter for the handle: the
    exporter is not the engine's. `env` is the environment /server_info reports.
    """
    sock = bind_socket(options.host, options.port, listen=False)
    port = sock.getsockname()[1]
    loop = asyncio.get_running_loop()
    engine: InprocClient | MPClient
    try:
        if core_ledger is not None:
            engine = MPClient(config, options, port=port, ledger_path=core_ledger, sink=sink, clock=clock)
            timed = await asyncio.to_thread(engine.start)
            engine.attach(loop)
        else:
            runtime, timed = _inproc(config, options, port, ledger, sink, clock)
    except EngineStartError:
        sock.close()
        return 1
    for t, lines in timed:
        await asyncio.sleep(max(0.0, t - clock()))
        sink(lines)
    if core_ledger is None:
        engine = InprocClient(runtime, RealtimeDriver(runtime, clock))
    sink(ignored_flags_line(engine.fmt, clock(), options.ignored_flags))  # the API server's args check
    sock.listen(2048)
    server = SimServer(engine, dev_mode=options.dev_mode, fault_endpoint=options.fault_endpoint, clock=clock,
                       env=env, log_requests=options.log_requests, access_log_excluded=options.access_log_excluded)
    app_config = uvicorn.Config(server.app, log_config=None, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2)
    servers: list[uvicorn.Server] = [_Server(app_config)]
    inproc = engine if isinstance(engine, InprocClient) else None
    handle = RunningEngine(inproc.runtime if inproc else None, server, servers, port, dcgm_port,
                           engine.pid if isinstance(engine, MPClient) else None)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, handle.stop)
    if not options.keep_alive_on_death:

        def shut_down_later() -> None:
            loop.call_later(DEATH_SHUTDOWN_DELAY_S, handle.stop)

        engine.on_death = shut_down_later
    driver_task = asyncio.ensure_future(inproc.driver.run()) if inproc else None
    tasks = [asyncio.ensure_future(servers[0].serve(sockets=[sock]))]
    while not all(s.started for s in servers) and not any(t.done() for t in tasks):
        await asyncio.sleep(0.01)
    if on_ready is not None:
        on_ready(handle)
    try:
        await tasks[0]
    finally:
        handle.stop()
        if inproc is not None and driver_task is not None:
            inproc.driver.stop()
            await asyncio.gather(driver_task, return_exceptions=True)
            inproc.core.release_gpus()
        elif isinstance(engine, MPClient):
            engine.close()
    return 0


def core_process_wanted(options: SimOptions, env: Mapping[str, str]) -> bool:
    """vLLM V1 runs the busy loop in an EngineCore process unless VLLM_ENABLE_V1_MULTIPROCESSING=0; V0 never."""
    return options.profile.v1 and env.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") not in ("0", "false", "False")


def main(argv: list[str] | None = None) -> int:
    """Entry point of `doctor sim engine`."""
    args = sys.argv[1:] if argv is None else argv
    try:
        config, options = parse_engine_args(args)
    except EngineArgsError as exc:
        message = str(exc)
        if message.startswith("doctor sim engine: error"):
            build_parser().print_usage(sys.stderr)
        print(message, file=sys.stderr)
        return 2
    sink = LineWriter(sys.stdout, options.log_file)
    ledger_path = options.gpu_ledger or default_ledger_path()
    ledger: GpuLedger = FileLedger(ledger_path)
    try:
        dcgm_port = ensure_exporter(options, ledger_path, config.gpus)
        core_ledger = ledger_path if core_process_wanted(options, os.environ) else None
        return asyncio.run(serve(config, options, ledger=ledger, sink=sink, dcgm_port=dcgm_port,
                                 core_ledger=core_ledger, env=dict(os.environ)))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"error: could not listen on {options.host}:{options.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        sink.close()


def _port_taken(host: str, port: int) -> bool:
    try:
        dcgm.bind(host, port).close()
    except OSError:
        return True
    return False


def ensure_exporter(options: SimOptions, ledger_path: Path, gpus: tuple[int, ...]) -> int | None:
    """The node's dcgm-exporter on --dcgm-port: the one already there (shared), else a detached one started now.

    The exporter is a daemon of the node, not of the engine: it keeps answering after the engine is gone.
    """
    if options.dcgm_port is None:
        return None
    if options.dcgm_port and _port_taken(options.host, options.dcgm_port):
        return options.dcgm_port
    return dcgm.spawn(options.host, options.dcgm_port, ledger_path, gpus, options.preset.name)[1]


class EngineThread:
    """A sim engine served from a background thread (tests, the demo)."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, ledger: GpuLedger | None = None,
                 echo: bool = False) -> None:
        config, options = parse_engine_args(argv, env=env or {})
        self.env = dict(env or {})
        if "--host" not in argv:
            options.host = "127.0.0.1"
        if "--port" not in argv:
            options.port = 0
        self.config, self.options = config, options
        self.sink = LineWriter(sys.stdout if echo else None, options.log_file)
        self.sink.keep = True
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self.handle: RunningEngine | None = None
        self.exporter: dcgm.ExporterThread | None = None  # the node's exporter, when this engine started it
        self.dcgm_port: int | None = None
        self.exit_code: int | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sim-engine")

    def _run(self) -> None:
        def ready(handle: RunningEngine) -> None:
            self.handle = handle
            self._ready.set()

        try:
            self.exit_code = asyncio.run(serve(self.config, self.options, ledger=self.ledger, sink=self.sink,
                                               on_ready=ready, dcgm_port=self.dcgm_port, env=self.env))
        finally:
            self._ready.set()

    def _start_exporter(self) -> None:
        """Serve the node's exporter on --dcgm-port unless one already does (then it is shared)."""
        port = self.options.dcgm_port
        if port is None:
            return
        try:
            sock = dcgm.bind(self.options.host, port)
        except OSError:
            self.dcgm_port = port
            return
        self.exporter = dcgm.ExporterThread(sock, self.ledger, self.config.gpus, self.options.preset.hardware)
        self.exporter.start()
        self.dcgm_port = self.exporter.port

    def launch(self) -> EngineThread:
        """Start the node's exporter (unless one serves) and the process-like thread; return at once (its
        start-up runs; see `wait_ready`)."""
        self._start_exporter()
        self._thread.start()
        return self

    def start(self, timeout: float | None = None) -> EngineThread:
        """Launch and wait until the engine serves (its modelled start-up included; see `wait_ready`)."""
        return self.launch().wait_ready(timeout)

    def wait_ready(self, timeout: float | None = None) -> EngineThread:
        """Until the engine serves or its start fails; `timeout` defaults to its modelled start-up + 30 s."""
        if timeout is None:
            probe = EngineCore(self.config, self.options.preset, self.options.profile, now=0.0)
            timeout = probe.startup.total_s + 30.0
        if not self._ready.wait(timeout):
            raise TimeoutError("sim engine did not start in time")
        if self.handle is None:
            if self.exporter is not None:
                self.exporter.stop()
            raise EngineStartError(f"sim engine failed to start (exit {self.exit_code})", self.sink.lines)
        return self

    @property
    def url(self) -> str:
        assert self.handle is not None
        return f"http://{self.options.host}:{self.handle.port}"

    @property
    def logs(self) -> list[str]:
        return self.sink.lines

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the engine, then the exporter this engine started (it outlived the engine until now)."""
        if self.handle is not None:
            self.handle.stop()
        self._thread.join(timeout)
        if self.exporter is not None:
            self.exporter.stop()
        self.sink.close()
