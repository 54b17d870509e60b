"""Latency the admission router adds, at P50 and P99, against calling the engine directly.

One very fast sim engine (--time-scale 0.01) and the router run as their own processes; this process
sends open-loop Poisson arrivals at each rate to both paths side by side (every arrival goes to the
router and, at the same moment, straight to the engine), so both see the same engine load. Goal on a
2-core machine at 200 requests/s: under 1 ms added at P50, under 5 ms at P99. With --stream the requests
stream (SSE, STREAM_CHUNKS chunks) and the table shows the time to the first chunk and to the last one.

The last column is the router process's CPU time (user + system) per routed request over the measured run.

    .venv/bin/python bench/router_overhead.py [--rates 50,100,200] [--seconds 5] [--upstream stub] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
BODY = {"model": "m", "prompt": "hello there", "max_tokens": 1}


STREAM_CHUNKS = 20  # chunks per streamed response, the stub's spaced STREAM_GAP_S apart
STREAM_GAP_S = 0.005
STUB_BODY = (b'{"id":"cmpl-stub","object":"text_completion","created":0,"model":"m","choices":[{"index":0,'
             b'"text":" hi","logprobs":null,"finish_reason":"length","stop_reason":null}],'
             b'"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}')


def serve_stub(port: int) -> None:
    """A minimal keep-alive HTTP/1.1 engine stand-in that answers at once, or streams STREAM_CHUNKS SSE chunks
    STREAM_GAP_S apart when asked to stream (isolates the router's own cost)."""
    response = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(STUB_BODY)).encode() + b"\r\n\r\n" + STUB_BODY)
    health = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    stream_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    event = b'data: {"id":"cmpl-stub","object":"text_completion","choices":[{"index":0,"text":" hi"}]}\n\n'
    done = b"data: [DONE]\n\n"

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while True:
                head, sep, rest = self.buf.partition(b"\r\n\r\n")
                if not sep:
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                if len(rest) < length:
                    return
                body, self.buf = rest[:length], rest[length:]
                if head.startswith(b"GET /health"):
                    self.t.write(health)  # type: ignore[attr-defined]
                elif b'"stream": true' in body:
                    self._stream()
                else:
                    self.t.write(response)  # type: ignore[attr-defined]

        def _stream(self) -> None:
            loop = asyncio.get_running_loop()
            write = self.t.write  # type: ignore[attr-defined]
            write(stream_head + chunk(event))
            for i in range(1, STREAM_CHUNKS):
                loop.call_later(i * STREAM_GAP_S, write, chunk(event))
            loop.call_later(STREAM_CHUNKS * STREAM_GAP_S, write, chunk(done) + b"0\r\n\r\n")

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Proto, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not become healthy in {timeout:g} s")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


class RawPool:
    """Keep-alive HTTP/1.1 connections with a pre-built request: a load generator cheap enough that it is
    not the bottleneck (httpx costs about a millisecond of CPU per request here)."""

    def __init__(self, url: str, body: bytes) -> None:
        hostport = url.split("//", 1)[1]
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.request = (f"POST /v1/completions HTTP/1.1\r\nhost: {hostport}\r\ncontent-type: application/json\r\n"
                        f"content-length: {len(body)}\r\n\r\n").encode() + body
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self) -> tuple[int, float]:
        """Send the request; its status and the perf_counter time its first body bytes arrived."""
        conn = self.idle.pop() if self.idle else await asyncio.open_connection(self.host, self.port)
        reader, writer = conn
        writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        chunked = False
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            name = k.strip().lower()
            if name == b"content-length":
                length = int(v)
            elif name == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        first = 0.0
        if chunked:
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                await reader.readexactly(size + 2)
                first = first or time.perf_counter()
                if size == 0:
                    break
        else:
            await reader.readexactly(length)
            first = time.perf_counter()
        self.idle.append(conn)
        return status, first

    def close(self) -> None:
        for _, w in self.idle:
            w.close()


async def _one(pool: RawPool, out: list[tuple[float, float]], errors: list[int]) -> None:
    """One request: appends (time to the first body bytes, time to the end) or counts an error."""
    t = time.perf_counter()
    try:
        status, first = await pool.post()
        ok = status == 200
    except (OSError, asyncio.IncompleteReadError, ValueError):
        ok = False
    if ok:
        out.append((first - t, time.perf_counter() - t))
    else:
        errors.append(1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process `pid` has used so far."""
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


async def run_rate(engine: str, router: str, rate: float, seconds: float, seed: int,
                   body: bytes, router_cpu: Callable[[], float]) -> dict[str, float]:
    rng = random.Random(seed)
    direct: list[tuple[float, float]] = []
    routed: list[tuple[float, float]] = []
    errors: list[int] = []
    pools = {engine: RawPool(engine, body), router: RawPool(router, body)}
    for _ in range(20):  # warm connections on both paths
        await asyncio.gather(_one(pools[engine], [], []), _one(pools[router], [], []))
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Future[None]] = []
    cpu0 = router_cpu()
    start = loop.time()
    t = start
    n = 0
    while t - start < seconds:
        t += rng.expovariate(rate)
        delay = t - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        first, second = (engine, router) if n % 2 else (router, engine)
        for url in (first, second):
            tasks.append(asyncio.ensure_future(_one(pools[url], direct if url == engine else routed, errors)))
        n += 1
    elapsed = loop.time() - start
    await asyncio.gather(*tasks)
    cpu = router_cpu() - cpu0
    for pool in pools.values():
        pool.close()
    row = {"rate": rate, "sent": n / elapsed, "n": len(routed), "errors": len(errors),
           "cpu_per_request": cpu / max(1, len(routed))}
    for what, i in (("", 1), ("first_", 0)):  # to the end; to the first body bytes
        d, r = [x[i] for x in direct], [x[i] for x in routed]
        row |= {f"direct_{what}p50": pct(d, 0.5), f"direct_{what}p99": pct(d, 0.99),
                f"router_{what}p50": pct(r, 0.5), f"router_{what}p99": pct(r, 0.99),
                f"direct_{what}mean": statistics.fmean(d), f"router_{what}mean": statistics.fmean(r)}
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rates", default="50,100,200", help="requests/s, comma-separated (default 50,100,200)")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per rate (default 5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--upstream", choices=["sim", "stub"], default="sim",
                   help="sim: a sim engine at --time-scale 0.01; stub: an instant HTTP responder (router cost only)")
    p.add_argument("--stream", action="store_true",
                   help=f"streamed requests (SSE; the stub sends {STREAM_CHUNKS} chunks {STREAM_GAP_S * 1000:g} ms "
                        "apart): adds the time to the first chunk")
    p.add_argument("--serve-stub", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_stub:
        serve_stub(args.serve_stub)
        return 0
    rates = [float(r) for r in args.rates.split(",")]
    ep, rp = free_port(), free_port()
    engine, router = f"http://127.0.0.1:{ep}", f"http://127.0.0.1:{rp}"
    py = sys.executable
    if args.upstream == "stub":
        cmd = [py, str(Path(__file__).resolve()), "--serve-stub", str(ep)]
    else:
        cmd = [py, "-c", "import sys; from sim.engine_cli import main; sys.exit(main(sys.argv[1:]))",
               "m", "--enforce-eager", "--time-scale", "0.01", "--max-num-seqs", "512",
               "--host", "127.0.0.1", "--port", str(ep)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)]
    try:
        wait_ready(engine)
        procs.append(subprocess.Popen([py, "-m", "router.cli", "--hot", engine, "--cold", engine, "--port", str(rp),
                                       "--policy-file", "", "--log-level", "warning"], cwd=ROOT))
        wait_ready(router)
        body = json.dumps(BODY | ({"stream": True, "max_tokens": STREAM_CHUNKS} if args.stream else {})).encode()
        pid = procs[-1].pid
        rows = [asyncio.run(run_rate(engine, router, r, args.seconds, args.seed, body, lambda: cpu_seconds(pid)))
                for r in rates]
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            proc.wait(10)
    ms = 1000.0
    kind = f"streamed ({STREAM_CHUNKS} chunks)" if args.stream else "non-streamed"
    print(f"router overhead: open-loop Poisson arrivals, {args.seconds:g} s per rate, every arrival sent both "
          f"directly and through the router; {kind} completions; upstream: {args.upstream}")
    measures = [("", "whole response")] + ([("first_", "first chunk")] if args.stream else [])
    for what, label in measures:
        print(f"{label}:")
        print(f"{'rate/s':>7} {'sent/s':>7} {'n':>6} {'err':>4} | {'direct p50':>10} {'router p50':>10} "
              f"{'added p50':>9} | {'direct p99':>10} {'router p99':>10} {'added p99':>9} | {'CPU/req':>7}  (ms)")
        for r in rows:
            print(f"{r['rate']:7.0f} {r['sent']:7.1f} {r['n']:6.0f} {r['errors']:4.0f} | "
                  f"{r[f'direct_{what}p50'] * ms:10.2f} {r[f'router_{what}p50'] * ms:10.2f} "
                  f"{(r[f'router_{what}p50'] - r[f'direct_{what}p50']) * ms:9.2f} | "
                  f"{r[f'direct_{what}p99'] * ms:10.2f} {r[f'router_{what}p99'] * ms:10.2f} "
                  f"{(r[f'router_{what}p99'] - r[f'direct_{what}p99']) * ms:9.2f} | "
                  f"{r['cpu_per_request'] * ms:7.3f}")
    last = rows[-1]
    added50 = (last["router_p50"] - last["direct_p50"]) * ms
    added99 = (last["router_p99"] - last["direct_p99"]) * ms
    print(f"goal at {last['rate']:.0f}/s: added P50 < 1 ms ({'met' if added50 < 1 else 'NOT met'}: {added50:.2f}), "
          f"added P99 < 5 ms ({'met' if added99 < 5 else 'NOT met'}: {added99:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
