"""The text table of a summary: `vllm bench serve`'s `Serving Benchmark Result`, then per-class lines."""

from __future__ import annotations

from typing import Any


def _latency_block(lines: list[str], s: dict[str, Any], key: str, label: str, title: str) -> None:
    lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
    lines.append("{:<40} {:<10.2f}".format(f"Mean {label} (ms):", s[f"mean_{key}_ms"]))
    lines.append("{:<40} {:<10.2f}".format(f"Median {label} (ms):", s[f"median_{key}_ms"]))
    for p in s.get("percentiles", [99.0]):
        lines.append("{:<40} {:<10.2f}".format(f"P{p:g} {label} (ms):", s[f"p{p:g}_{key}_ms"]))


def format_summary(summary: dict[str, Any]) -> str:
    """The `============ Serving Benchmark Result ============` table, then per-class lines."""
    s = summary
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append("{:<40} {:<10}".format("Successful requests:", s["completed"]))
    lines.append("{:<40} {:<10}".format("Failed requests:", s["failed"]))
    if s.get("max_concurrency") is not None:
        lines.append("{:<40} {:<10}".format("Maximum request concurrency:", s["max_concurrency"]))
    lines.append("{:<40} {:<10.2f}".format("Benchmark duration (s):", s["duration"]))
    lines.append("{:<40} {:<10}".format("Total input tokens:", s["total_input_tokens"]))
    lines.append("{:<40} {:<10}".format("Total generated tokens:", s["total_output_tokens"]))
    lines.append("{:<40} {:<10.2f}".format("Request throughput (req/s):", s["request_throughput"]))
    if s.get("request_goodput") is not None:
        lines.append("{:<40} {:<10.2f}".format("Request goodput (req/s):", s["request_goodput"]))
    lines.append("{:<40} {:<10.2f}".format("Output token throughput (tok/s):", s["output_throughput"]))
    lines.append(
        "{:<40} {:<10.2f}".format("Peak output token throughput (tok/s):", s["max_output_tokens_per_s"])
    )
    lines.append("{:<40} {:<10}".format("Peak concurrent requests:", s["max_concurrent_requests"]))
    lines.append("{:<40} {:<10.2f}".format("Total Token throughput (tok/s):", s["total_token_throughput"]))
    _latency_block(lines, s, "ttft", "TTFT", "Time to First Token")
    _latency_block(lines, s, "tpot", "TPOT", "Time per Output Token (excl. 1st token)")
    _latency_block(lines, s, "itl", "ITL", "Inter-token Latency")
    _latency_block(lines, s, "e2el", "E2EL", "End-to-end Latency")
    classes = s.get("classes") or {}
    for name in ("short", "long"):
        c = classes.get(name)
        if not c or c["completed"] + c["failed"] == 0:
            continue
        lines.append("{s:{c}^{n}}".format(s=f" Class: {name} ", n=50, c="-"))
        counts = f"{c['completed']} / {c['failed']}"
        lines.append("{:<40} {:<10}".format("Successful / failed requests:", counts))
        if c.get("request_goodput") is not None:
            lines.append("{:<40} {:<10.2f}".format("Request goodput (req/s):", c["request_goodput"]))
        p = (s.get("percentiles") or [99.0])[-1]
        for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL")):
            value = f"{c[f'median_{key}_ms']:.2f} / {c[f'p{p:g}_{key}_ms']:.2f}"
            lines.append("{:<40} {:<10}".format(f"Median / P{p:g} {label} (ms):", value))
    if s.get("errors"):
        lines.append("{s:{c}^{n}}".format(s=" Errors ", n=50, c="-"))
        for key, n in sorted(s["errors"].items(), key=lambda kv: -kv[1]):
            lines.append("{:<40} {:<10}".format(f"{key[:39]}:", n))
    lines.append("=" * 50)
    return "\n".join(lines)
