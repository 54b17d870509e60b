"""Write the seed corpora (tests/fuzz/corpus/<target>/) from real captures kept in the repo: the vLLM /metrics
fixtures of each release (cut down to the families the doctor maps, a few buckets each), the sim engine's
exposition for the profiles no fixture covers, the log fixtures, the test suite's Alertmanager payloads, the
example config. Run from the repository root: `python -m tests.fuzz.make_seeds` (the output is committed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from collectors.scrape import _TABLE
from tests.fuzz.targets import CORPUS

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "collectors" / "fixtures"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)")


def shrink(text: str, buckets: int = 2) -> str:
    """Keep the mapped families (TYPE lines, and HELP of the prefix-cache ones, which name their unit) and
    their samples, `buckets` bucket lines per series plus +Inf; the long model name shortened."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for line in text.replace("meta-llama/Llama-3.1-8B-Instruct", "m").splitlines():
        if line.startswith("# HELP") and "prefix_cache" not in line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and (parts[2] in _TABLE or f"{parts[2]}_total" in _TABLE
                                    or f"{parts[2]}_bucket" in _TABLE):
                out.append(line)
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in _TABLE:
            continue
        name = m.group(1)
        if name.endswith("_bucket") and 'le="+Inf"' not in line:
            key = name + line[line.index("{"):line.find("le=")] if "{" in line else name
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > buckets:
                continue
        out.append(line)
    return "\n".join(out) + "\n"


def _write(target: str, name: str, data: bytes | str) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


def metrics() -> None:
    for a in sorted(FIXTURES.glob("metrics_*_a.txt")):
        tag = a.name[len("metrics_"):-len("_a.txt")]
        b = a.with_name(a.name.replace("_a.txt", "_b.txt"))
        _write("metrics", f"fixture-{tag}.txt", shrink(a.read_text()) + "# SPLIT\n" + shrink(b.read_text()))
    from sim.testing import engine_thread

    for profile in ("0.10-v0", "0.26", "0.32"):
        with engine_thread(["m", "--vllm-version", profile]) as eng:
            text = httpx.get(eng.url + "/metrics", timeout=30).text
        _write("metrics", f"sim-{profile}.txt", shrink(text))
    _write("metrics", "bad-values.txt", 'vllm:num_requests_running{engine="0"} +Inf\nvllm:kv_cache_usage_perc 1e999\n'
           'vllm:num_requests_waiting NaN\nvllm:prompt_tokens_total -1\n'
           'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 3\n'
           'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} NaN\n')


def logs() -> None:
    for f in sorted(FIXTURES.glob("logs_*.txt")):
        _write("logs", f.name, f.read_bytes())


def alerts() -> None:
    from tests.serve.payloads import alert, body

    _write("alerts", "one-firing.json", body(alert()))
    _write("alerts", "two-mixed.json", body(alert(), alert("abc123", status="resolved", engine="cold"), truncated=2))
    _write("alerts", "no-playbook.json", body(alert(playbook=None, alertname="VllmKvCachePressure")))


def config() -> None:
    _write("config", "example.toml", (ROOT / "examples" / "doctor.toml").read_bytes())
    _write("config", "small.toml", '[doctor]\nmode = "dry-run"\ntimeout_s = "30s"\nhourly_action_budget = 6\n\n'
           '[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:8001"\ngpus = [0]\n\n'
           '[thresholds.kv_pressure]\nkv_usage_ratio = 0.9\n\n[serve]\nlisten = "127.0.0.1:9400"\n')


def router_request() -> None:
    _write("router_request", "completion.json", b"p" + json.dumps({"model": "m", "prompt": "a b c",
                                                                    "max_tokens": 5}).encode())
    _write("router_request", "batch.json", b"p" + json.dumps({"prompt": ["one", "three four"]}).encode())
    _write("router_request", "ids.json", b"p" + json.dumps({"prompt": [[1, 2, 3], [4]], "user": "u"}).encode())
    _write("router_request", "chat.json", b"c" + json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "x"}]}],
        "stream": True}).encode())


def wire() -> None:
    responses = {
        "content-length.http": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"
                               b'{"ok":true}',
        "chunked-sse.http": b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                            b"e\r\ndata: {\"a\":1}\n\n\r\n10\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
        "chunked-trailer.http": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n"
                                b"x-trailer: t\r\n\r\n",
        "until-eof.http": b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nbody until the engine closes",
        "408-close.http": b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        "two-responses.http": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 408 Request Timeout\r\n"
                              b"content-length: 0\r\n\r\n",
        "cl-conflict.http": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 5\r\n\r\nhello",
        "cl-and-chunked.http": b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n"
                               b"2\r\nok\r\n0\r\n\r\n",
        "folded.http": b"HTTP/1.1 200 OK\r\nx-a: one\r\n two\r\ncontent-length: 0\r\n\r\n",
        "early-close.http": b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part",
        "100-continue.http": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx",
        "big-header.http": b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 9000 + b"\r\ncontent-length: 0\r\n\r\n",
    }
    for name, raw in responses.items():
        _write("wire", name, bytes([7, 3]) + raw)  # read 8 bytes at a time, drain, then a clean close


def policy() -> None:
    from router.policy import initial_policy

    doc = initial_policy(["http://127.0.0.1:8001"], ["http://127.0.0.1:8002"]).to_dict()
    _write("policy", "initial.json", json.dumps(doc))
    _write("policy", "length-limit.json", json.dumps({**doc, "length_limit_tokens": 8192, "version": 3,
                                                      "length_limit_expires_at": "2030-01-01T00:00:00Z"}))
    _write("policy", "minimal.json", json.dumps({"route_threshold_tokens": 5120}))


def dcgm() -> None:
    for f in sorted(FIXTURES.glob("dcgm_*.txt")):
        _write("dcgm", f.name, f.read_bytes())


def router_metrics() -> None:
    from tests.router.router_helpers import engine, prompt, router

    with engine("hot") as hot, engine("cold") as cold, router(hot.url, cold.url) as rt, \
            httpx.Client(base_url=rt.url, timeout=60) as client:
        for tokens, stream in ((10, False), (10, True), (2000, False)):
            client.post("/v1/completions", json={"prompt": prompt(tokens), "max_tokens": 4, "stream": stream})
        text = client.get("/metrics").text
    _write("router_metrics", "router.txt", "\n".join(line for line in text.splitlines()
                                                      if not line.startswith("# HELP")) + "\n")


def main() -> None:
    for make in (metrics, logs, alerts, config, router_request, wire, policy, dcgm, router_metrics):
        make()


if __name__ == "__main__":
    main()
