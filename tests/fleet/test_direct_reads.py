"""Direct reads of many engines: at most `max_concurrent_reads` engines at once, each within its own deadline,
so a hung engine and one that drips its answer delay nobody else (50 small HTTP servers on loopback)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from doctor.engines import EngineRef
from doctor.plan import Plan
from doctor.reading import EngineResult, engine_deadline_s, read_all
from sim.harness import Harness
from sim.testing import ALL_GRAPHED
from sim.workload import RequestSpec

ENGINES = 50
HUNG, DRIPPING = "e07", "e31"
BOUND = 8
TIMEOUT_S = 1.5


def _metrics_text() -> bytes:
    h = Harness()
    h.add_engine("e", ["m", *ALL_GRAPHED, "--vllm-version", "0.33"])
    h.load([RequestSpec(index=i, arrival_s=0.01 * i, prompt_tokens=100, output_tokens=10, long=False)
            for i in range(12)])
    h.drain()
    return h.metrics_text("e").encode()


class Fleet:
    """Tiny engines on 127.0.0.2 (not this host's processes to the doctor); records who is being read at once."""

    def __init__(self, metrics: bytes) -> None:
        self.metrics = metrics
        self.in_flight: dict[str, int] = {}
        self.most_engines_at_once = 0
        self.release = asyncio.Event()

    def handler(self, name: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                self.in_flight[name] = self.in_flight.get(name, 0) + 1
                self.most_engines_at_once = max(self.most_engines_at_once,
                                                sum(1 for n in self.in_flight.values() if n))
                try:
                    await self._answer(name, path, writer)
                finally:
                    self.in_flight[name] -= 1
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()
        return serve

    async def _answer(self, name: str, path: str, writer: asyncio.StreamWriter) -> None:
        bodies = {"/health": b"", "/metrics": self.metrics, "/version": b'{"version": "0.11.0"}',
                  "/v1/models": b'{"data": [{"id": "m", "root": "m", "max_model_len": 32768}]}'}
        body = bodies.get(path)
        if body is None:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        if path == "/metrics" and name == HUNG:
            await self.release.wait()  # never answers while the doctor reads
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        if path == "/metrics" and name == DRIPPING:  # a byte at a time: httpx's read timeout never trips
            writer.write(head)
            for i in range(len(body)):
                writer.write(body[i:i + 1])
                await writer.drain()
                await asyncio.sleep(TIMEOUT_S / 4)
            return
        writer.write(head + body)
        await writer.drain()


def test_a_hung_engine_delays_nobody_and_the_bound_holds(tmp_path: Path) -> None:
    fleet = Fleet(_metrics_text())

    async def run() -> tuple[list[EngineResult], float]:
        servers = [await asyncio.start_server(fleet.handler(f"e{i:02d}"), "127.0.0.2", 0) for i in range(ENGINES)]
        try:
            engines = tuple(EngineRef(f"e{i:02d}", "hot", f"http://127.0.0.2:{s.sockets[0].getsockname()[1]}")
                            for i, s in enumerate(servers))
            plan = Plan(engines=engines, state_dir=tmp_path, sample_s=0.1, request_timeout_s=TIMEOUT_S,
                        max_concurrent_reads=BOUND, history=False)
            started = time.monotonic()
            results = await read_all(plan, None)
            return results, time.monotonic() - started
        finally:
            fleet.release.set()
            for s in servers:
                s.close()
                await s.wait_closed()

    results, elapsed = asyncio.run(run())
    by_name = {r.ref.name: r for r in results}
    assert len(by_name) == ENGINES
    for name, result in by_name.items():
        errors = [s.error for s in result.reading.of("metrics") if s.error]
        if name == HUNG:
            assert errors == ["/metrics timed out after 1.5s"] * 2, errors
        elif name == DRIPPING:
            assert errors == [f"/metrics: no complete answer within {engine_deadline_s(TIMEOUT_S):g}s "
                              f"(request timeout 1.5s)"] * 2, errors
        else:
            assert not errors, (name, errors)
            assert result.signals.values["qps"] is not None and result.signals.health == "ok", name
    assert HUNG != DRIPPING and 2 <= fleet.most_engines_at_once <= BOUND
    # Two rounds, each held up only by the slowest engine's own deadline, never one engine after another
    # (50 engines x 2 s). Generous: the machine may be slow.
    print(f"\n{ENGINES} engines, {BOUND} at a time, one hung and one dripping: read_all {elapsed:.2f}s")
    assert elapsed < 40.0


@pytest.mark.parametrize("bound", [0, -3])
def test_a_bound_below_one_still_reads(tmp_path: Path, bound: int) -> None:
    async def run() -> int:
        plan = Plan(engines=(EngineRef("a", "hot", "http://127.0.0.2:1"),), state_dir=tmp_path, sample_s=0.0,
                    request_timeout_s=1.0, max_concurrent_reads=bound, history=False)
        return len(await asyncio.wait_for(read_all(plan, None), 30))  # a gate of 0 would wait forever

    assert asyncio.run(run()) == 1
