"""The API server's side of an EngineCore child process (vLLM V1's AsyncMPClient, in small).

`MPClient.start` spawns `python -m sim.core_proc`, sends it the engine's configuration and waits for
its start-up. Requests go down the socket pair; tokens come back in batches and drive the API
server's own copy of each request. When the child dies (its engine's fatal error, or killed: SIGKILL,
the OOM killer) the client fails every request in flight, writes vLLM's API-server lines for it
(`died unexpectedly` where the release has one, then `EngineDeadError`) and calls `on_death`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sim.args import SimOptions
from sim.engine import EngineConfig, EngineStartError
from sim.faults import TimedFault
from sim.logfmt import LogFormatter
from sim.profiles import VersionProfile
from sim.request import SimRequest
from sim.stats import MetricsState, new_metrics_state

SHUTDOWN_WAIT_S = 5.0
METRICS_WAIT_S = 2.0  # then the last statistics the core sent


def _sample_len(rng: random.Random, median: float, sigma: float) -> int:
    """The engine core's output-length draw (`EngineCore.sample_output_len`), from the same seed."""
    import math

    return max(1, round(rng.lognormvariate(math.log(median), sigma)))


class MPClient:
    """An engine core in a child process, seen from the API server's event loop."""

    def __init__(self, config: EngineConfig, options: SimOptions, *, port: int, ledger_path: Path,
                 sink: Callable[[list[str]], None], clock: Callable[[], float] = time.time) -> None:
        self.config, self.options = config, options
        self.profile: VersionProfile = options.profile
        self.preset = options.preset
        self.port = port
        self.ledger_path = ledger_path
        self.sink = sink
        self.clock = clock
        self.started_at = clock()
        self.num_gpu_blocks = 0
        self.on_death: Callable[[], None] | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.fmt = LogFormatter(self.profile, api_pid=os.getpid(), core_pid=0)
        self._http = new_metrics_state(self.profile, config.max_model_len, self.started_at)
        self._last: MetricsState | None = None
        self._slow = 0.0
        self._requests: dict[str, SimRequest] = {}
        self._replies: dict[int, asyncio.Future[Any]] = {}
        self._tokens = itertools.count(1)
        self._rng = random.Random(config.seed)
        self._dead = False
        self._sleeping = False
        self._server_config: tuple[str, dict[str, Any]] = ("", {})

    # ----- life cycle ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> list[tuple[float, list[str]]]:
        """Spawn the EngineCore and wait for its start-up (the modelled phases, which the child runs and logs, plus
        `timeout_s`); EngineStartError when it failed (it logged why). Returns the API server's own start-up lines
        after the engine is up, as (time, lines), for the caller to write before it listens."""
        from sim.core_proc import CoreInit
        from sim.engine import EngineCore

        probe = EngineCore(self.config, self.preset, self.profile, now=0.0)
        mine, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parent.parent)  # where `sim` is imported from, installed or not
        path = os.environ.get("PYTHONPATH", "")
        env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
        self.proc = subprocess.Popen([sys.executable, "-m", "sim.core_proc", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        theirs.close()
        self.conn = Connection(mine.detach())
        self.conn.send(CoreInit(self.config, self.options, os.getpid(), self.port, self.ledger_path,
                                started_at=self.started_at))
        if not self.conn.poll(probe.startup.total_s + timeout_s):
            self._reap()
            raise EngineStartError("EngineCore did not start in time", [])
        try:
            msg = self.conn.recv()
        except EOFError:
            msg = ("start_failed", f"EngineCore exited with {self._reap()}")
        if msg[0] != "ready":
            self._reap()
            raise EngineStartError(str(msg[1]), [])
        info = msg[1]
        self.num_gpu_blocks = int(info["num_gpu_blocks"])
        self._server_config = info["server_config"]
        self.fmt = LogFormatter(self.profile, api_pid=os.getpid(), core_pid=self.proc.pid)
        return list(info["timed"])

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the child's messages on this loop from now on."""
        assert self.conn is not None
        loop.add_reader(self.conn.fileno(), self._on_readable)

    def close(self) -> None:
        """Ask the EngineCore to shut down (it releases its GPUs), then make sure it is gone."""
        if self.conn is not None and not self._dead:
            with contextlib.suppress(OSError, ValueError):
                asyncio.get_running_loop().remove_reader(self.conn.fileno())
            with contextlib.suppress(OSError):
                self.conn.send(("shutdown",))
        self._dead = True
        self._reap()

    def _reap(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        try:
            return proc.wait(SHUTDOWN_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
        finally:
            if self.conn is not None:
                self.conn.close()
                self.conn = None

    # ----- messages from the core ---------------------------------------------------------------

    def _on_readable(self) -> None:
        conn = self.conn
        try:
            while conn is not None and conn.poll():
                self._handle(conn.recv())
        except (EOFError, OSError):
            self._engine_died(None)

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "out":
            now = self.clock()
            for rid, count, reason in msg[1]:
                req = self._requests.get(rid)
                if req is None:
                    continue
                new = count - req.output_count
                req.output_count = count
                if reason is not None:
                    req.finish_reason = reason
                    del self._requests[rid]
                if req.listener is not None:
                    req.listener(req, new, now)
        elif kind == "reply":
            fut = self._replies.pop(msg[1], None)
            if fut is not None and not fut.done():
                fut.set_result(msg[2])
        elif kind == "dead":
            self._engine_died(str(msg[1]))

    def _engine_died(self, cause: str | None) -> None:
        """The EngineCore is gone: fail what is in flight and say so as vLLM's API server does."""
        if self._dead:
            return
        self._dead = True
        loop = asyncio.get_running_loop()
        if self.conn is not None:
            with contextlib.suppress(OSError, ValueError):
                loop.remove_reader(self.conn.fileno())
        loop.run_in_executor(None, self._reap)  # collect the exited process (no zombie)
        now = self.clock()
        # `cause=None`: no "fatal error" message came, the process vanished.
        self.sink(self.fmt.engine_death_client(now, cause=cause))
        for req in list(self._requests.values()):
            req.finish_reason = "error"
            if req.listener is not None:
                req.listener(req, 0, now)
        self._requests.clear()
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(EngineDeadError())
        self._replies.clear()
        if self.on_death is not None:
            self.on_death()

    # ----- the EngineClient surface -------------------------------------------------------------

    @property
    def dead(self) -> bool:
        return self._dead

    @property
    def sleeping(self) -> bool:
        return self._sleeping

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    def sample_output_len(self) -> int:
        return _sample_len(self._rng, self.preset.output_median, self.preset.output_sigma)

    def _send(self, msg: tuple[Any, ...]) -> None:
        if self._dead or self.conn is None:
            raise EngineDeadError()
        try:
            self.conn.send(msg)
        except OSError:
            self._engine_died(None)
            raise EngineDeadError() from None

    async def _call(self, name: str, *args: Any) -> Any:
        token = next(self._tokens)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._replies[token] = fut
        self._send(("call", token, name, args))
        return await fut

    async def add_request(self, req: SimRequest) -> None:
        await asyncio.sleep((self.preset.frontend_delay_s + req.num_prompt * 1e-6) * self.config.time_scale)
        if self._dead:
            req.finish_reason = "error"
            if req.listener is not None:
                req.listener(req, 0, self.clock())
            return
        self._requests[req.request_id] = req
        self._send(("add", (req.request_id, list(req.prompt), req.max_tokens, req.target_output,
                            req.arrival_time, req.priority, req.output_seed)))

    def abort(self, request_id: str, now: float) -> None:
        if self._requests.pop(request_id, None) is not None and not self._dead:
            with contextlib.suppress(EngineDeadError):
                self._send(("abort", request_id))

    async def metrics(self) -> tuple[MetricsState, float]:
        if not self._dead:
            # vLLM serves /metrics from the API server's registry: a stalled core must not stall the scrape.
            with contextlib.suppress(EngineDeadError, TimeoutError):
                self._last, self._slow = await asyncio.wait_for(self._call("metrics"), METRICS_WAIT_S)
        state = self._last if self._last is not None else new_metrics_state(
            self.profile, self.config.max_model_len, self.started_at)
        state.http_requests, state.http_duration = self._http.http_requests, self._http.http_duration
        return state, self._slow

    def record_http(self, handler: str, method: str, status: int, duration_s: float) -> None:
        self._http.record_http(handler, method, status, duration_s)

    def access(self, now: float, client: str, method: str, path: str, status: int) -> None:
        self.sink(self.fmt.access(now, client, method, path, status))

    def log(self, lines: list[str]) -> None:
        self.sink(lines)

    async def reset_prefix_cache(self) -> None:
        await self._call("reset_prefix_cache")

    async def sleep(self, level: int, now: float) -> None:
        await self._call("sleep", level)
        self._sleeping = True

    async def wake_up(self, now: float) -> None:
        await self._call("wake_up")
        self._sleeping = False

    async def set_hung(self, hung: bool) -> None:
        await self._call("set_hung", hung)

    async def apply_fault(self, fault: TimedFault, now: float) -> None:
        with contextlib.suppress(EngineDeadError):
            await self._call("fault", fault)

    def server_config(self) -> tuple[str, dict[str, Any]]:
        return self._server_config


class EngineDeadError(RuntimeError):
    """vllm.v1.engine.exceptions.EngineDeadError: the EngineCore is gone."""

    def __init__(self) -> None:
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.")
