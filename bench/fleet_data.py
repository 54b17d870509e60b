"""A generated fleet for bench/fleet_read.py: N engines' vLLM exposition from the sim, as OpenMetrics for
`promtool tsdb create-blocks-from openmetrics`, and as cheap loopback exporters.

One sim engine (vLLM 0.33 surface) serves a few batches of requests; its /metrics text after each batch is
one scrape. Engine i's numbers are its own: running = i % 7, waiting = i % 5, KV usage = (i % 100) / 100,
every counter and histogram series (buckets, sums and counts alike, so they stay consistent) scaled by
1 + i/1000, other gauges as the sim wrote them. `exposition(i, k)` is what engine i's /metrics answered at
scrape k: the text a direct read parses and the series the backfill holds are the same numbers.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

GAUGES = {"vllm:num_requests_running": lambda i: float(i % 7), "vllm:num_requests_waiting": lambda i: float(i % 5),
          "vllm:kv_cache_usage_perc": lambda i: (i % 100) / 100}
VERSION = "0.33.0"
_SAMPLE = re.compile(r"^([^{\s]+)(\{.*\})?\s+(\S+)$")


@dataclass(frozen=True)
class Line:
    """One sample line of the template exposition."""

    family: str
    kind: str  # counter, gauge, histogram, ... (from # TYPE)
    name: str
    labels: str  # inside the braces, "" for none
    value: float


def scrapes(count: int = 3) -> list[str]:
    """The sim engine's /metrics text after each of `count` batches of requests (cumulative counters)."""
    from sim.harness import Harness
    from sim.testing import ALL_GRAPHED
    from sim.workload import RequestSpec

    h = Harness()
    h.add_engine("e", ["m", *ALL_GRAPHED, "--vllm-version", VERSION.rsplit(".", 1)[0]])
    texts = []
    for batch in range(count):
        h.load([RequestSpec(index=i, arrival_s=h.now - h.start + 0.01 * i, prompt_tokens=100 + 40 * i + 500 * batch,
                            output_tokens=10 + i, long=False) for i in range(12 + 20 * batch)])
        h.drain()
        texts.append(h.metrics_text("e"))
    return texts


def template(text: str) -> list[str | Line]:
    """An exposition's lines: comments as they are, samples parsed (without the `_created` series)."""
    out: list[str | Line] = []
    family, kind = "", ""
    for raw in text.splitlines():
        if raw.startswith("# TYPE "):
            _, _, family, kind = raw.split(" ", 3)
        if raw.startswith("#"):
            out.append(raw)
            continue
        m = _SAMPLE.match(raw)
        if m is None:
            raise ValueError(f"the sim's exposition has a line this generator cannot read: {raw!r}")
        if not m.group(1).endswith("_created"):
            out.append(Line(family, kind, m.group(1), (m.group(2) or "{}")[1:-1], float(m.group(3))))
    return out


def value_of(line: Line, i: int) -> float:
    """Engine i's value of one template sample."""
    if line.family in GAUGES:
        return GAUGES[line.family](i)
    return line.value if line.kind in ("gauge", "unknown", "info") else line.value * (1 + i / 1000)


def number(x: float) -> str:
    """A sample value as exposition text (NaN, +Inf, -Inf spelled the way both formats read them)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(x)


class Fleet:
    """Engines over a few scrapes (the sim's), each engine's numbers its own."""

    def __init__(self, texts: list[str]) -> None:
        self.templates = [template(t) for t in texts]

    def instance(self, i: int) -> str:
        return f"engine-{i:04d}"

    def exposition(self, i: int, k: int) -> str:
        """What engine i's /metrics answered at scrape k."""
        return "".join((x if isinstance(x, str) else f"{x.name}{{{x.labels}}} {number(value_of(x, i))}") + "\n"
                       for x in self.templates[k])

    def write_openmetrics(self, path: Path, engines: int, times: list[float], job: str = "vllm") -> int:
        """Engines 0..engines-1: every series at every scrape time (one per template), timestamps in seconds,
        `# EOF` last; the number of samples written."""
        if len(times) != len(self.templates):
            raise ValueError(f"{len(times)} times for {len(self.templates)} scrapes")
        samples = [[x for x in lines if isinstance(x, Line)] for lines in self.templates]
        written = 0
        with path.open("w") as out:
            for i in range(engines):
                extra = f'instance="{self.instance(i)}",job="{job}"'
                chunk = []
                for series in zip(*samples, strict=True):
                    first = series[0]
                    labels = f"{extra},{first.labels}" if first.labels else extra
                    chunk.extend(f"{x.name}{{{labels}}} {number(value_of(x, i))} {t:.3f}\n"
                                 for t, x in zip(times, series, strict=True))
                written += len(chunk)
                out.write("".join(chunk))
            out.write("# EOF\n")
        return written


# ------------------------------------------------------------------------------------ cheap exporters

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "root": "m",
                                                  "max_model_len": 32768}]}).encode()


def _response(body: bytes, status: str = "200 OK", kind: bytes = b"text/plain") -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n".encode() + b"content-type: " + kind
            + b"\r\n\r\n" + body)


class Exporter(asyncio.Protocol):
    """One engine's HTTP root on a keep-alive HTTP/1.1 connection: /health, /version, /v1/models, and /metrics
    answering scrape k at its k-th read (the last one after that), or 404 when it serves none."""

    def __init__(self, answers: dict[bytes, bytes], metrics: list[bytes], reads: list[int]) -> None:
        self.answers, self.metrics, self.reads = answers, metrics, reads
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                return
            self.buf = rest  # the doctor's reads are GETs without a body
            path = head.split(b" ", 2)[1].split(b"?", 1)[0]
            if path == b"/metrics" and self.metrics:
                k = min(self.reads[0], len(self.metrics) - 1)
                self.reads[0] += 1
                answer = self.metrics[k]
            else:
                answer = self.answers.get(path, _response(b"", "404 Not Found"))
            self.t.write(answer)  # type: ignore[attr-defined]


async def serve_exporters(fleet: Fleet, count: int, host: str, with_metrics: bool) -> None:
    """`count` engines on `host`, one port each; prints their ports as one JSON line, serves until killed."""
    answers = {b"/health": _response(b""), b"/version": _response(json.dumps({"version": VERSION}).encode(),
                                                                   kind=b"application/json"),
               b"/v1/models": _response(MODELS, kind=b"application/json")}
    loop = asyncio.get_running_loop()
    ports = []
    for i in range(count):
        metrics = [_response(fleet.exposition(i, k).encode()) for k in range(len(fleet.templates))] \
            if with_metrics else []
        reads = [0]
        server = await loop.create_server(lambda m=metrics, r=reads: Exporter(answers, m, r), host, 0, backlog=256)  # type: ignore[misc]
        ports.append(server.sockets[0].getsockname()[1])
    print(json.dumps(ports), flush=True)
    await asyncio.Event().wait()


def exporter_main(argv: Iterable[str]) -> int:
    """`python bench/fleet_data.py COUNT HOST metrics|no-metrics SCRAPES`: the exporters, in their own process."""
    count, host, mode, n = list(argv)
    asyncio.run(serve_exporters(Fleet(scrapes(int(n))), int(count), host, mode == "metrics"))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(exporter_main(sys.argv[1:]))
