"""The figures of `vllm bench serve` for a `LoadResult`, overall and per request class (short/long):
throughputs, goodput against SLOs, latency statistics (times in ms), peaks and error counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sim.loadgen_types import LoadResult, RequestResult

GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, what `vllm bench serve` reports); 0.0 for no
    values. The one percentile of raw samples in the project (the load generator, the trials, the tests).
    Not `statistics.quantiles`: that cuts data into n equal groups, and `--metric-percentiles` takes any float
    (99.9); its "inclusive" method is this interpolation at the cut points (a test holds them equal)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stats(prefix: str, values_s: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    ms = [v * 1000.0 for v in values_s]
    n = len(ms)
    mean = sum(ms) / n if n else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in ms) / n) if n else 0.0  # population, as np.std
    out = {
        f"mean_{prefix}_ms": mean,
        f"median_{prefix}_ms": percentile(ms, 50),
        f"std_{prefix}_ms": std,
    }
    for p in percentiles:
        out[f"p{p:g}_{prefix}_ms"] = percentile(ms, p)
    return out


def _good(r: RequestResult, slo_s: dict[str, float]) -> bool:
    values = {"ttft": r.ttft_s or 0.0, "tpot": r.tpot_s, "e2el": r.e2e_s or 0.0}
    return all(values[k] <= limit for k, limit in slo_s.items())


def _summarize_group(
    results: Sequence[RequestResult],
    duration: float,
    slo_s: dict[str, float] | None,
    percentiles: Sequence[float],
) -> dict[str, Any]:
    ok = [r for r in results if r.success]
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    out: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(ok)),
        "request_goodput": per_s(sum(_good(r, slo_s) for r in ok)) if slo_s else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
    }
    out |= _stats("ttft", [r.ttft_s or 0.0 for r in ok], percentiles)
    out |= _stats("tpot", [r.tpot_s for r in ok], percentiles)
    out |= _stats("itl", [x for r in ok for x in r.itls_s], percentiles)
    out |= _stats("e2el", [r.e2e_s or 0.0 for r in ok], percentiles)
    return out


def _peaks(results: Sequence[RequestResult]) -> tuple[float, int]:
    """Peak output tokens per 1-s bucket (chunk times) and peak concurrent requests."""
    buckets: dict[int, float] = {}
    edges: list[tuple[float, int]] = []
    for r in results:
        if r.sent_s is None:
            continue
        edges.append((r.sent_s, 1))
        edges.append((r.sent_s + (r.e2e_s or 0.0), -1))
        if r.success and r.ttft_s is not None:
            t = r.sent_s + r.ttft_s
            times = [t]
            for gap in r.itls_s:
                t += gap
                times.append(t)
            per_chunk = r.output_tokens / len(times)  # 1 unless chunks carry several tokens
            for t in times:
                buckets[int(t)] = buckets.get(int(t), 0.0) + per_chunk
    running = peak = 0
    for _, delta in sorted(edges, key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    return float(max(buckets.values(), default=0)), peak


def summarize(
    result: LoadResult,
    *,
    goodput_slo: dict[str, float] | None = None,
    percentiles: Sequence[float] = (99.0,),
) -> dict[str, Any]:
    """Figures of `vllm bench serve` (times in ms), overall and per class ("short", "long").

    `goodput_slo` maps "ttft", "tpot", "e2el" to limits in ms (vLLM's --goodput); a request is
    good when it completed and meets all of them.
    """
    slo_s: dict[str, float] | None = None
    if goodput_slo:
        unknown = set(goodput_slo) - set(GOODPUT_METRICS)
        if unknown:
            raise ValueError(
                f"unknown goodput metric(s) {', '.join(sorted(unknown))}; use {', '.join(GOODPUT_METRICS)}"
            )
        slo_s = {k: v / 1000.0 for k, v in goodput_slo.items()}
    peak_tput, peak_conc = _peaks(result.results)
    errors: dict[str, int] = {}
    for r in result.results:
        if not r.success:
            key = f"HTTP {r.status}" if r.status not in (None, 200) else r.error.split(":")[0]
            errors[key] = errors.get(key, 0) + 1
    summary: dict[str, Any] = {
        "base_url": result.base_url,
        "model": result.model,
        "api": result.api,
        "num_prompts": len(result.results),
        "max_concurrency": result.max_concurrency,
        "duration": result.duration_s,
        "goodput_slo_ms": dict(goodput_slo) if goodput_slo else None,
        "percentiles": list(percentiles),
    }
    summary |= _summarize_group(result.results, result.duration_s, slo_s, percentiles)
    summary["max_output_tokens_per_s"] = peak_tput
    summary["max_concurrent_requests"] = peak_conc
    summary["errors"] = errors
    summary["classes"] = {
        name: _summarize_group(
            [r for r in result.results if r.long == is_long], result.duration_s, slo_s, percentiles
        )
        for name, is_long in (("short", False), ("long", True))
    }
    return summary
