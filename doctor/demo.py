"""`doctor demo`: the seed's hot and cold engines (simulated) under load, and what can be seen of them.

Until the diagnose loop lands, the demo shows the raw view an on-call engineer would start from:
per engine every few seconds, the running and waiting requests, KV-cache usage, token throughput and
the P99 time to first token over the last interval, read from each engine's /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sim.engine_cli import EngineThread
from sim.gpu import MemoryLedger
from sim.loadgen import format_summary, run_load, summarize
from sim.workload import RequestSpec, WorkloadSpec, generate

HOT_ARGS = ["seed-model", "--max-num-seqs", "16", "--max-num-batched-tokens", "5120",
            "--gpu-memory-utilization", "0.85", "--scheduling-policy", "fcfs", "--enforce-eager"]
COLD_ARGS = ["seed-model", "--enable-chunked-prefill", "--max-model-len", "32768", "--max-num-seqs", "2",
             "--gpu-memory-utilization", "0.85", "--enforce-eager"]
ROUTE_THRESHOLD = 5120


@dataclass
class Snapshot:
    """Counters and gauges of one scrape."""

    running: float = 0.0
    waiting: float = 0.0
    kv: float = 0.0
    gen_tokens: float = 0.0
    ttft_buckets: dict[float, float] | None = None


def read_snapshot(text: str) -> Snapshot:
    snap = Snapshot(ttft_buckets={})
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "vllm:num_requests_running":
                snap.running = s.value
            elif s.name == "vllm:num_requests_waiting":
                snap.waiting = s.value
            elif s.name == "vllm:kv_cache_usage_perc":
                snap.kv = s.value
            elif s.name == "vllm:generation_tokens_total":
                snap.gen_tokens = s.value
            elif s.name == "vllm:time_to_first_token_seconds_bucket" and snap.ttft_buckets is not None:
                snap.ttft_buckets[float(s.labels["le"])] = s.value
    return snap


def p99_between(before: Snapshot, after: Snapshot) -> float | None:
    """P99 from bucket deltas (linear inside the bucket, as histogram_quantile)."""
    if not before.ttft_buckets or not after.ttft_buckets:
        return None
    bounds = sorted(after.ttft_buckets)
    deltas = [after.ttft_buckets[b] - before.ttft_buckets.get(b, 0.0) for b in bounds]
    total = deltas[-1]
    if total <= 0:
        return None
    rank = 0.99 * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in zip(bounds, deltas, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return prev_bound
            span = count - prev_count
            return prev_bound + (bound - prev_bound) * ((rank - prev_count) / span if span else 1.0)
        prev_bound, prev_count = bound, count
    return None


async def watch(urls: dict[str, str], seconds: float, interval: float) -> None:
    """Print one line per engine every `interval` seconds."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        last: dict[str, Snapshot] = {}
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            await asyncio.sleep(interval)
            t = time.monotonic() - start
            for name, url in urls.items():
                try:
                    snap = read_snapshot((await client.get(url + "/metrics")).text)
                except httpx.HTTPError as exc:
                    print(f"  t={t:5.1f}s {name:4} unreachable: {exc}")
                    continue
                prev = last.get(name)
                tps = (snap.gen_tokens - prev.gen_tokens) / interval if prev else 0.0
                p99 = p99_between(prev, snap) if prev else None
                p99_text = f"{p99 * 1000:7.0f} ms" if p99 is not None else "      - "
                print(f"  t={t:5.1f}s {name:4} running {snap.running:3.0f}  waiting {snap.waiting:3.0f}  "
                      f"KV {snap.kv * 100:5.1f}%  gen {tps:7.1f} tok/s  P99 TTFT {p99_text}")
                last[name] = snap


def build_workload(seconds: float, rate: float, storm_at: float, seed: int) -> list[RequestSpec]:
    """Chat-like traffic with a long-prompt storm part-way through."""
    spec = WorkloadSpec(rate_qps=rate, duration_s=seconds, long_share=0.02, seed=seed,
                        schedule=((storm_at, 1.0, 0.25),))
    return generate(spec)


async def run_demo(seconds: float, rate: float, seed: int) -> int:
    ledger = MemoryLedger()
    print("serving-doctor demo: a hot engine (short prompts) and a cold engine (long prompts), simulated.")
    print(f"  hot : {' '.join(HOT_ARGS[1:])}")
    print(f"  cold: {' '.join(COLD_ARGS[1:])}")
    hot = EngineThread(HOT_ARGS, ledger=ledger).start()
    cold = EngineThread(COLD_ARGS, env={"CUDA_VISIBLE_DEVICES": "1"}, ledger=ledger).start()
    try:
        storm_at = seconds / 2
        specs = build_workload(seconds, rate, storm_at, seed)
        short = [s for s in specs if s.prompt_tokens < ROUTE_THRESHOLD]
        long = [s for s in specs if s.prompt_tokens >= ROUTE_THRESHOLD]
        print(f"\nload: {len(specs)} requests over {seconds:.0f} s at {rate} req/s; long-prompt storm "
              f"(25% >= 4096 tokens) from t={storm_at:.0f}s; prompts >= {ROUTE_THRESHOLD} tokens go cold\n")
        results = await asyncio.gather(
            run_load(hot.url, short, seed=seed, timeout_s=seconds * 4),
            run_load(cold.url, long, seed=seed, timeout_s=seconds * 4),
            watch({"hot": hot.url, "cold": cold.url}, seconds + 5, 5.0),
        )
        for name, result in (("hot", results[0]), ("cold", results[1])):
            print(f"\n[{name}] client-side summary")
            print(format_summary(summarize(result)))
    finally:
        hot.stop()
        cold.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="doctor demo", description=__doc__)
    parser.add_argument("--seconds", type=float, default=40.0, help="length of the load (default 40)")
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rate <= 0:
        parser.error("--seconds and --rate must be > 0")
    try:
        return asyncio.run(run_demo(args.seconds, args.rate, args.seed))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
