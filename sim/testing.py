"""Helpers for tests and demos: a sim engine on loopback in a background thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sim.engine_cli import EngineThread
from sim.gpu import GpuLedger


@contextmanager
def engine_thread(argv: list[str], *, env: dict[str, str] | None = None,
                  ledger: GpuLedger | None = None) -> Iterator[EngineThread]:
    """Start a sim engine (arguments as `vllm serve`) on 127.0.0.1 and a free port; stop it after."""
    engine = EngineThread(argv, env=env, ledger=ledger).start()
    try:
        yield engine
    finally:
        engine.stop()


@contextmanager
def running_engine(argv: list[str], *, env: dict[str, str] | None = None) -> Iterator[str]:
    """Like engine_thread, yielding only the base URL."""
    with engine_thread(argv, env=env) as engine:
        yield engine.url
