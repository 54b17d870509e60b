"""`doctor sim dcgm`: the node's dcgm-exporter, apart from any engine, reading the shared GPU ledger.

The real dcgm-exporter is a daemon of the node: it keeps reporting a GPU (its last Xid, its memory
freed or still held) after the vLLM on it died, which is how a GPU fault is told from a software
crash. So the sim's exporter reads the node's ledger (`sim.gpu`), never an engine: memory is what
live holders claim, utilisation is what they last reported (stale reports count as idle), and the
Xid and ECC count are the driver's per-GPU record.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sim.gpu import FileLedger, GpuLedger, GpuReading, GpuState, default_ledger_path, gpu_uuid, render_dcgm
from sim.presets import DEFAULT_PRESET, PRESETS, Hardware, get_preset

STALE_ACTIVITY_S = 2.0  # a holder that has not reported for this long is idle (hung, or gone)
CONTENT_TYPE = "text/plain; version=0.0.4"


def node_readings(ledger: GpuLedger, gpus: Sequence[int], hardware: Hardware, now: float) -> list[GpuReading]:
    """What dcgm-exporter reports for these GPUs of the node now."""
    view = ledger.view()
    out: list[GpuReading] = []
    for gpu in gpus:
        state = view.gpus.get(gpu, GpuState())
        acts = [c.activity for c in view.claims.values()
                if gpu in c.gpus and c.activity is not None and now - c.activity.at <= STALE_ACTIVITY_S]
        util = min(1.0, sum(a.gpu_util for a in acts))
        dram = min(1.0, sum(a.dram_active for a in acts))
        tensor = min(1.0, sum(a.tensor_active for a in acts))
        out.append(GpuReading(
            index=gpu, name=hardware.name, uuid=gpu_uuid(gpu), total_bytes=hardware.hbm_bytes,
            used_bytes=min(hardware.hbm_bytes, view.used(gpu)), gpu_util=util, dram_active=dram,
            tensor_active=tensor, power_w=60.0 + (hardware.power_max_w - 60.0) * util,
            temperature_c=32.0 + 40.0 * util, xid_last=state.xid_last, ecc_dbe_total=state.ecc_dbe,
        ))
    return out


def build_app(ledger: GpuLedger, gpus: Sequence[int], hardware: Hardware,
              clock: Callable[[], float] = time.time) -> Starlette:
    """dcgm-exporter's /metrics for the node's GPUs."""

    async def metrics(request: Request) -> Response:
        readings = await asyncio.to_thread(node_readings, ledger, gpus, hardware, clock())
        return Response(render_dcgm(readings), media_type=None, headers={"Content-Type": CONTENT_TYPE})

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture (the thread or `main` decides when to stop)."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def _server(app: Starlette) -> uvicorn.Server:
    return _Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free port); OSError when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class ExporterThread:
    """The exporter served from a background thread (engines in threads: tests, the demo, scenarios)."""

    def __init__(self, sock: socket.socket, ledger: GpuLedger, gpus: Sequence[int], hardware: Hardware) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.server = _server(build_app(ledger, tuple(gpus), hardware))
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[sock])),
                                        daemon=True, name="sim-dcgm")

    def start(self, timeout: float = 10.0) -> ExporterThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError("the sim's dcgm-exporter did not start")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        self.sock.close()


def spawn(host: str, port: int, ledger_path: Path, gpus: Sequence[int], preset: str = DEFAULT_PRESET, *,
          detached: bool = True, timeout_s: float = 20.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start `doctor sim dcgm` (detached: in its own session, so it outlives its starter); the process and port."""
    cmd = [sys.executable, "-m", "sim.dcgm", "--host", host, "--port", str(port), "--gpu-ledger", str(ledger_path),
           "--gpus", ",".join(map(str, gpus)), "--preset", preset, "--announce"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=detached, close_fds=True, env=dict(os.environ))
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()  # "port N" once it listens
    proc.stdout.close()
    if not line.startswith("port "):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout_s)
        raise RuntimeError(f"the sim's dcgm-exporter did not start on {host}:{port} (exit {proc.poll()})")
    return proc, int(line.split()[1])


def parse_gpus(text: str) -> tuple[int, ...]:
    try:
        gpus = tuple(int(g) for g in text.split(",") if g.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus {text!r} is not a list of GPU indices") from None
    if not gpus or any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"--gpus {text!r} is not a list of GPU indices")
    return gpus


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="doctor sim dcgm", description="The simulated node's dcgm-exporter: the GPUs "
                                "of a sim GPU ledger, served until stopped (it outlives the engines on them).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9400, help="0 picks a free port (dcgm-exporter's default: 9400)")
    p.add_argument("--gpu-ledger", type=Path, help="the node's GPU ledger (default: the sim's per-user node)")
    p.add_argument("--gpus", type=parse_gpus, default=(0,), help="GPU indices to report, e.g. 0,1 (default 0)")
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS), help="the GPU kind of the node")
    p.add_argument("--announce", action="store_true", help=argparse.SUPPRESS)  # print "port N" when listening
    return p


async def _serve(server: uvicorn.Server, sock: socket.socket, announce: bool) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if announce:
        print(f"port {sock.getsockname()[1]}", flush=True)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the starter stops reading; later writes must not fail
        os.close(devnull)
    await task


def main(argv: list[str] | None = None) -> int:
    """Entry point of `doctor sim dcgm`."""
    ns = build_parser().parse_args(argv)
    hardware = get_preset(ns.preset).hardware
    ledger = FileLedger(ns.gpu_ledger or default_ledger_path())
    try:
        sock = bind(ns.host, ns.port)
    except OSError as exc:
        print(f"error: could not listen on {ns.host}:{ns.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if not ns.announce:
        print(f"dcgm-exporter (sim) for GPUs {','.join(map(str, ns.gpus))} of {ledger.path} on "
              f"http://{ns.host}:{sock.getsockname()[1]}/metrics", flush=True)
    asyncio.run(_serve(_server(build_app(ledger, ns.gpus, hardware)), sock, ns.announce))
    return 0


if __name__ == "__main__":
    sys.exit(main())
