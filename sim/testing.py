"""Helpers for tests and demos: a sim engine on loopback in a background thread."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sim import dcgm
from sim.engine_cli import EngineThread
from sim.gpu import GpuLedger

FAST_START = ["--sim-startup-scale", "0"]
"""Serve at once: no modelled start-up (weights, profiling, compile, CUDA graphs) before the port listens."""
ALL_GRAPHED = ["--compilation-config", '{"max_cudagraph_capture_size": 1048576}']
"""CUDA graphs captured up to max_num_batched_tokens: no step runs eagerly, so none pays the cold-start penalty."""


def fast_start(argv: list[str]) -> list[str]:
    """`argv` with FAST_START unless it sets --sim-startup-scale itself."""
    return argv if "--sim-startup-scale" in argv else [*argv, *FAST_START]


@contextmanager
def engine_thread(argv: list[str], *, env: dict[str, str] | None = None,
                  ledger: GpuLedger | None = None) -> Iterator[EngineThread]:
    """Start a sim engine (arguments as `vllm serve`) on 127.0.0.1 and a free port; stop it after. Its start-up
    is skipped (FAST_START) unless `argv` sets --sim-startup-scale."""
    engine = EngineThread(fast_start(argv), env=env, ledger=ledger).start()
    try:
        yield engine
    finally:
        engine.stop()


@contextmanager
def running_engine(argv: list[str], *, env: dict[str, str] | None = None) -> Iterator[str]:
    """Like engine_thread, yielding only the base URL."""
    with engine_thread(argv, env=env) as engine:
        yield engine.url


@contextmanager
def node_exporter(ledger: Path, *, port: int = 0, gpus: Sequence[int] = (0,)) -> Iterator[str]:
    """The node's `doctor sim dcgm` for a ledger file, stopped after; yields its /metrics URL.

    Engines started with `--dcgm-port` on its port share it (and it outlives them).
    """
    proc, bound = dcgm.spawn("127.0.0.1", port, ledger, gpus, detached=False)
    try:
        yield f"http://127.0.0.1:{bound}/metrics"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
