"""Latency the admission router adds, at P50 and P99, against calling the engine directly.

One very fast sim engine (--time-scale 0.01) and the router run as their own processes; this process
sends open-loop Poisson arrivals at each rate to both paths side by side (every arrival goes to the
router and, at the same moment, straight to the engine), so both see the same engine load. Goal on a
2-core machine at 200 requests/s: under 1 ms added at P50, under 5 ms at P99. With --stream the requests
stream (SSE, STREAM_CHUNKS chunks) and the table shows the time to the first chunk and to the last one.

The last column is the router process's CPU time (user + system) per routed request over the measured run.
With --nginx every arrival also goes through Debian's nginx as a reverse proxy on the same hop (one process,
keep-alive upstream, no access log, unbuffered), and a second table puts the router's added latency and CPU
per request beside nginx's. Goal at fleet rates (200 and 1,000 requests/s): within 2x of nginx's added P50.

With --floor (beside --nginx) a bare byte splice in Python on uvloop takes the same hop too: the least any proxy
written in Python adds, which puts the 2x-of-nginx goal beside what the language allows.

    .venv/bin/python bench/router_overhead.py [--rates 50,100,200] [--seconds 5] [--upstream stub] [--stream]
                                              [--nginx [--floor]]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
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


def serve_splice(port: int, upstream_port: int) -> None:
    """The floor under any proxy written in Python: bytes copied between each client connection and its own engine
    connection on uvloop (the router's loop), with no HTTP parsing, routing, admission or metrics at all. Not a
    proxy anyone could run (it cannot route, retry or refuse); what the router pays beyond it is the router's own
    work, and what it pays beyond nginx is Python's."""

    class Upstream(asyncio.Protocol):
        def __init__(self, client: asyncio.Transport) -> None:
            self.client = client

        def data_received(self, data: bytes) -> None:
            self.client.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self.client.close()

    class Client(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t: asyncio.Transport = transport  # type: ignore[assignment]
            self.up: asyncio.Transport | None = None
            self.early: list[bytes] = []  # read before the engine connection was up (uvloop may deliver some)
            self.t.pause_reading()
            self.connecting = asyncio.ensure_future(self._connect())

        async def _connect(self) -> None:
            loop = asyncio.get_running_loop()
            try:
                self.up, _ = await loop.create_connection(lambda: Upstream(self.t), "127.0.0.1", upstream_port)
            except OSError as exc:
                print(f"splice: connect: {exc}", file=sys.stderr)
                self.t.close()
                return
            for data in self.early:
                self.up.write(data)
            self.t.resume_reading()

        def data_received(self, data: bytes) -> None:
            if self.up is None:
                self.early.append(data)
            else:
                self.up.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.up is not None:
                self.up.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Client, "127.0.0.1", port)
        await server.serve_forever()

    import uvloop

    uvloop.run(main())


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


async def run_rate(paths: dict[str, str], rate: float, seconds: float, seed: int, body: bytes,
                   cpus: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Open-loop Poisson arrivals at `rate`, each sent down every path ({"direct": url, "router": url, ...}) at the
    same moment, the order rotating; percentiles per path, and the CPU per request of each process in `cpus`."""
    rng = random.Random(seed)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    errors: dict[str, list[int]] = {name: [] for name in paths}
    pools = {name: RawPool(url, body) for name, url in paths.items()}
    names = list(paths)
    for _ in range(20):  # warm connections on every path
        await asyncio.gather(*(_one(pools[name], [], []) for name in names))
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Future[None]] = []
    cpu0 = {name: read() for name, read in cpus.items()}
    start = loop.time()
    t = start
    n = 0
    while t - start < seconds:
        t += rng.expovariate(rate)
        delay = t - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        for name in names[n % len(names):] + names[:n % len(names)]:
            tasks.append(asyncio.ensure_future(_one(pools[name], samples[name], errors[name])))
        n += 1
    elapsed = loop.time() - start
    await asyncio.gather(*tasks)
    cpu = {name: read() - cpu0[name] for name, read in cpus.items()}
    for pool in pools.values():
        pool.close()
    row = {"rate": rate, "sent": n / elapsed, "n": len(samples["router"]), "errors": sum(map(len, errors.values())),
           "cpu_per_request": cpu["router"] / max(1, len(samples["router"]))}
    row |= {f"{name}_errors": len(errs) for name, errs in errors.items()}
    row |= {f"{name}_cpu_per_request": cpu[name] / max(1, len(samples[name])) for name in cpu}
    for what, i in (("", 1), ("first_", 0)):  # to the end; to the first body bytes
        for name, xs in samples.items():
            got = [x[i] for x in xs]
            row |= {f"{name}_{what}p50": pct(got, 0.5), f"{name}_{what}p99": pct(got, 0.99),
                    f"{name}_{what}mean": statistics.fmean(got)}
    return row


NGINX_CONF = """worker_processes 1;
master_process off;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    upstream engine {{ server 127.0.0.1:{engine}; keepalive 64; keepalive_requests 10000000; }}
    server {{
        listen 127.0.0.1:{port};
        keepalive_requests 10000000;
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def start_nginx(work: Path, engine_port: int, port: int) -> subprocess.Popen[bytes]:
    """Debian's nginx as a keep-alive reverse proxy to the engine: one process (as the router is), no access log,
    responses passed on as they come (proxy_buffering off, as the router streams), connections kept for the whole run
    (nginx closes a keep-alive connection after 1,000 requests by default: the load generator's next request on it
    failed, 11-12 errors a run at 1,000/s)."""
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        raise SystemExit("--nginx needs Debian's nginx: scripts/ensure-debian-packages.sh nginx-light:nginx "
                         "(make bench-router runs it)")
    (work / "nginx.conf").write_text(NGINX_CONF.format(work=work, engine=engine_port, port=port))
    return subprocess.Popen([binary, "-p", str(work), "-c", str(work / "nginx.conf"), "-e", str(work / "error.log")],
                            cwd=work, stdin=subprocess.DEVNULL)


def print_tables(rows: list[dict[str, float]], args: argparse.Namespace) -> None:
    ms = 1000.0
    kind = f"streamed ({STREAM_CHUNKS} chunks)" if args.stream else "non-streamed"
    also = " and through nginx" if args.nginx else ""
    print(f"router overhead: open-loop Poisson arrivals, {args.seconds:g} s per rate, every arrival sent "
          f"directly and through the router{also} at once; {kind} completions; upstream: {args.upstream}")
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
        if args.nginx:
            _beside(rows, "nginx", what, f"router beside nginx, {label} (added = through the proxy minus direct, "
                    "same arrivals)")
    failed = {k[:-len("_errors")]: int(sum(r[k] for r in rows)) for k in rows[0] if k.endswith("_errors")}
    if any(failed.values()):
        print("failed requests by path (all rates): " + ", ".join(f"{k} {v}" for k, v in failed.items()))
    if args.floor:
        print("the floor: a byte splice in Python on uvloop (no HTTP parsing, no routing; serve_splice) beside "
              "nginx and the router, whole response (added, ms):")
        print(f"{'rate/s':>7} | {'splice +p50':>11} {'nginx +p50':>10} {'x':>5} | {'router +p50':>11} "
              f"{'router/splice':>13} | {'splice CPU/req':>14} {'router CPU/req':>14}")
        for r in rows:
            a = {p: (r[f"{p}_p50"] - r["direct_p50"]) * ms for p in ("splice", "nginx", "router")}
            print(f"{r['rate']:7.0f} | {a['splice']:11.2f} {a['nginx']:10.2f} {_ratio(a['splice'], a['nginx']):>5} | "
                  f"{a['router']:11.2f} {_ratio(a['router'], a['splice']):>13} | "
                  f"{r['splice_cpu_per_request'] * ms:14.3f} {r['router_cpu_per_request'] * ms:14.3f}")
    if args.baseline:
        _beside(rows, "baseline", "", f"this checkout's router beside {args.baseline}'s (baseline), whole response")
    if args.uvicorn:
        _beside(rows, "uvicorn", "", "the router on its lean server beside the same router on uvicorn, whole response")
    last = rows[-1]
    added50 = (last["router_p50"] - last["direct_p50"]) * ms
    added99 = (last["router_p99"] - last["direct_p99"]) * ms
    print(f"goal at {last['rate']:.0f}/s: added P50 < 1 ms ({'met' if added50 < 1 else 'NOT met'}: {added50:.2f}), "
          f"added P99 < 5 ms ({'met' if added99 < 5 else 'NOT met'}: {added99:.2f})")
    if args.nginx and args.repeat == 1:
        for r in rows:
            ours, theirs = ((r[f"{p}_p50"] - r["direct_p50"]) * ms for p in ("router", "nginx"))
            held = ours <= 2 * max(theirs, 0.0)
            print(f"goal at {r['rate']:.0f}/s: router's added P50 within 2x of nginx's "
                  f"({'met' if held else 'NOT met'}: {ours:.2f} vs {theirs:.2f} ms, {_ratio(ours, theirs)})")
    if args.nginx and args.repeat > 1:
        _runs_beside_nginx(rows)


def _runs_beside_nginx(rows: list[dict[str, float]]) -> None:
    """Every run's added P50 ratio (router / nginx) per rate, their median, and how many runs met the 2x goal."""
    ms = 1000.0
    print("router's added P50 beside nginx's, run by run (ms; x = router / nginx):")
    for rate in dict.fromkeys(r["rate"] for r in rows):
        mine = [r for r in rows if r["rate"] == rate]
        pairs = [((r["router_p50"] - r["direct_p50"]) * ms, (r["nginx_p50"] - r["direct_p50"]) * ms) for r in mine]
        ratios = [ours / theirs if theirs > 1e-9 else float("inf") for ours, theirs in pairs]
        shown = "  ".join(f"{ours:.2f}/{theirs:.2f}={x:.1f}" for (ours, theirs), x in zip(pairs, ratios, strict=True))
        met = sum(x <= 2 for x in ratios)
        median = statistics.median(ratios)
        print(f"{rate:7.0f}/s | {shown}")
        print(f"goal at {rate:.0f}/s: router's added P50 within 2x of nginx's: median {median:.2f}x "
              f"({'met' if median <= 2 else 'NOT met'}), met in {met} of {len(ratios)} runs")


def _beside(rows: list[dict[str, float]], other: str, what: str, title: str) -> None:
    """The router's added P50 and P99 and CPU per request beside another path's, with the ratios."""
    ms = 1000.0
    print(f"{title}:")
    print(f"{'rate/s':>7} | {'router +p50':>11} {other + ' +p50':>14} {'x':>5} | {'router +p99':>11} "
          f"{other + ' +p99':>14} {'x':>5} | {'router CPU/req':>14} {other + ' CPU/req':>17} {'x':>5}  (ms)")
    for r in rows:
        added = {(p, q): (r[f"{p}_{what}{q}"] - r[f"direct_{what}{q}"]) * ms
                 for p in ("router", other) for q in ("p50", "p99")}
        cpu = {p: r[f"{p}_cpu_per_request"] * ms for p in ("router", other)}
        print(f"{r['rate']:7.0f} | {added['router', 'p50']:11.2f} {added[other, 'p50']:14.2f} "
              f"{_ratio(added['router', 'p50'], added[other, 'p50']):>5} | {added['router', 'p99']:11.2f} "
              f"{added[other, 'p99']:14.2f} {_ratio(added['router', 'p99'], added[other, 'p99']):>5} | "
              f"{cpu['router']:14.3f} {cpu[other]:17.3f} {_ratio(cpu['router'], cpu[other]):>5}")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}" if b > 1e-9 else "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rates", default="50,100,200", help="requests/s, comma-separated (default 50,100,200)")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per rate (default 5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the rates N times (each run its own arrivals, seed+k) and, with --nginx, print the ratio "
                        "of every run, their median and how many met the goal (default 1)")
    p.add_argument("--upstream", choices=["sim", "stub"], default="sim",
                   help="sim: a sim engine at --time-scale 0.01; stub: an instant HTTP responder (router cost only)")
    p.add_argument("--stream", action="store_true",
                   help=f"streamed requests (SSE; the stub sends {STREAM_CHUNKS} chunks {STREAM_GAP_S * 1000:g} ms "
                        "apart): adds the time to the first chunk")
    p.add_argument("--nginx", action="store_true",
                   help="also send every arrival through Debian's nginx as a reverse proxy on the same hop")
    p.add_argument("--uvicorn", action="store_true",
                   help="also send every arrival through a second router on uvicorn (http_server = \"uvicorn\", the "
                        "server the lean one replaced): A/B in one run")
    p.add_argument("--floor", action="store_true",
                   help="also send every arrival through a bare byte splice in Python on uvloop (with --nginx: the "
                        "floor any Python proxy pays, beside nginx's)")
    p.add_argument("--baseline", metavar="CHECKOUT",
                   help="also send every arrival through the router of another checkout of this repository (a git "
                        "worktree of an earlier commit): a change's A/B in one run")
    p.add_argument("--serve-stub", type=int, help=argparse.SUPPRESS)
    p.add_argument("--serve-splice", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_stub:
        serve_stub(args.serve_stub)
        return 0
    if args.serve_splice:
        listen, upstream = args.serve_splice.split(":")
        serve_splice(int(listen), int(upstream))
        return 0
    if args.floor and not args.nginx:
        p.error("--floor goes with --nginx (it is read beside nginx)")
    rates = [float(r) for r in args.rates.split(",")]
    ep, rp, np_ = free_port(), free_port(), free_port()
    paths = {"direct": f"http://127.0.0.1:{ep}", "router": f"http://127.0.0.1:{rp}"}
    py = sys.executable
    if args.upstream == "stub":
        cmd = [py, str(Path(__file__).resolve()), "--serve-stub", str(ep)]
    else:
        cmd = [py, "-c", "import sys; from sim.engine_cli import main; sys.exit(main(sys.argv[1:]))",
               "m", "--enforce-eager", "--time-scale", "0.01", "--max-num-seqs", "512",
               "--host", "127.0.0.1", "--port", str(ep)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)]
    with tempfile.TemporaryDirectory(prefix="router-bench-") as work:
        try:
            wait_ready(paths["direct"])
            procs.append(subprocess.Popen([py, "-m", "router.cli", "--hot", paths["direct"], "--cold", paths["direct"],
                                           "--port", str(rp), "--policy-file", "", "--log-level", "warning"],
                                          cwd=ROOT))
            wait_ready(paths["router"])
            pids = {"router": procs[-1].pid}
            if args.uvicorn:
                up = free_port()
                (Path(work) / "uvicorn.toml").write_text('http_server = "uvicorn"\n')
                procs.append(subprocess.Popen([py, "-m", "router.cli", "--hot", paths["direct"], "--cold",
                                               paths["direct"], "--port", str(up), "--policy-file", "", "--log-level",
                                               "warning", "--config", str(Path(work) / "uvicorn.toml")], cwd=ROOT))
                paths["uvicorn"] = f"http://127.0.0.1:{up}"
                wait_ready(paths["uvicorn"])
                pids["uvicorn"] = procs[-1].pid
            if args.baseline:
                bp = free_port()
                procs.append(subprocess.Popen([py, "-m", "router.cli", "--hot", paths["direct"], "--cold",
                                               paths["direct"], "--port", str(bp), "--policy-file", "", "--log-level",
                                               "warning"], cwd=Path(args.baseline).resolve()))
                paths["baseline"] = f"http://127.0.0.1:{bp}"
                wait_ready(paths["baseline"])
                pids["baseline"] = procs[-1].pid
            if args.floor:
                sp = free_port()
                procs.append(subprocess.Popen([py, str(Path(__file__).resolve()), "--serve-splice", f"{sp}:{ep}"],
                                              cwd=ROOT))
                paths["splice"] = f"http://127.0.0.1:{sp}"
                wait_ready(paths["splice"])
                pids["splice"] = procs[-1].pid
            if args.nginx:
                procs.append(start_nginx(Path(work), ep, np_))
                paths["nginx"] = f"http://127.0.0.1:{np_}"
                wait_ready(paths["nginx"])
                pids["nginx"] = procs[-1].pid
            body = json.dumps(BODY | ({"stream": True, "max_tokens": STREAM_CHUNKS} if args.stream else {})).encode()
            cpus: dict[str, Callable[[], float]] = {name: functools.partial(cpu_seconds, pid)
                                                    for name, pid in pids.items()}
            rows = []
            for k in range(args.repeat):  # each run its own arrivals (seed + k), the processes kept warm
                for r in rates:
                    row = asyncio.run(run_rate(paths, r, args.seconds, args.seed + k, body, cpus))
                    rows.append(row | {"run": k + 1})
                    if args.repeat > 1:
                        print(f"run {k + 1}/{args.repeat}, {r:g}/s done", file=sys.stderr, flush=True)
        finally:
            for proc in reversed(procs):
                proc.terminate()
            for proc in procs:
                proc.wait(10)
    print_tables(rows, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
