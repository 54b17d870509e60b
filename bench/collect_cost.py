"""Benchmark: the cost of reading one engine (parse + map + derive) against prometheus_client's bare parser.

The text is a realistic 0.33 scrape: a sim engine after a minute of chat load (every histogram filled,
`_created` series, process/python families, HTTP metrics for several handlers). "bare" is
`text_string_to_metric_families` with every sample touched; "parse" is `collectors.scrape.parse_metrics`
(collectors.promtext's fast path in front of that parser, + canonical mapping); "read" adds
`derive_metrics_signals` against the previous snapshot. Goal: read / bare within ~2x (with the fast path it is a
fraction of the bare parser). Prints a table; not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client.parser import text_string_to_metric_families

from collectors.derive import derive_metrics_signals
from collectors.scrape import parse_metrics
from collectors.types import EngineConfigView
from sim.harness import Harness
from sim.workload import WorkloadSpec, generate


def realistic_scrapes(version: str) -> tuple[str, str]:
    """Two scrapes of a loaded sim engine, 15 virtual seconds apart."""
    h = Harness(seed=1)
    engine = h.add_engine("e", ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "64", "--vllm-version", version])
    h.load(generate(WorkloadSpec(rate_qps=6, duration_s=60, seed=1, prefix_share=0.3)))
    for handler in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize"):
        for status in (200, 400, 500):
            engine.core.metrics.record_http(handler, "POST", status, 0.2)
    h.run_until(h.start + 45)
    first = h.metrics_text("e")
    h.run_until(h.start + 60)
    return first, h.metrics_text("e")


def timed(fns: list[Callable[[], object]], rounds: int, calls: int) -> list[float]:
    """Seconds per call of each function: rounds interleave the functions (fair under load); best round wins."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="0.33", help="vLLM version profile of the scrape (default 0.33)")
    ap.add_argument("--rounds", type=int, default=15, help="timing rounds (best one kept)")
    ap.add_argument("--calls", type=int, default=10, help="calls per function per round")
    args = ap.parse_args(argv)
    before, text = realistic_scrapes(args.version)
    prev = parse_metrics(before, 1000.0)
    config = EngineConfigView(max_num_seqs=64, max_num_batched_tokens=8192)

    def bare() -> None:
        for family in text_string_to_metric_families(text):
            for _sample in family.samples:
                pass

    def parse() -> None:
        parse_metrics(text, 1015.0)

    def read() -> None:
        derive_metrics_signals(prev, parse_metrics(text, 1015.0), config)

    cur = parse_metrics(text, 1015.0)

    def derive_only() -> None:
        derive_metrics_signals(prev, cur, config)

    lines = text.count("\n")
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    print(f"scrape: vLLM {args.version} profile, {len(text)} bytes, {lines} lines, {samples} samples")
    labels = ["bare prometheus_client parser", "parse_metrics (parse + map)", "derive only",
              "read one engine (parse + map + derive)"]
    rows = list(zip(labels, timed([bare, parse, derive_only, read], args.rounds, args.calls), strict=True))
    base = rows[0][1]
    print(f"{'step':<40} {'per call':>10} {'vs bare':>8}")
    for label, seconds in rows:
        print(f"{label:<40} {seconds * 1e3:>8.3f}ms {seconds / base:>7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
