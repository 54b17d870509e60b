"""The hot/cold route threshold on the twin: both calibrated engines behind a length router, the two windows'
traffic merged and split at each candidate threshold (the seed's is 5120 tokens)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from doctor.advise.engine import WARMUP_S, Fitted
from doctor.advise.twin import run
from doctor.advise.workload import draw

SEED_THRESHOLD = 5120


def search_route(hot: Fitted, cold: Fitted, *, current: int, thresholds: Iterable[int],
                 slo_hot: Mapping[str, float], slo_cold: Mapping[str, float], seed: int = 0) -> dict[str, Any]:
    """Per threshold: each role's predicted P99 TTFT and e2e and their goodput (each within its own SLOs)."""
    assert hot.profile and cold.profile and hot.settings and cold.settings
    window = max(hot.profile.window_s, cold.profile.window_s)
    merged = [*draw(hot.profile, duration_s=WARMUP_S + window, seed=seed, replay_from=WARMUP_S),
              *draw(cold.profile, duration_s=WARMUP_S + window, seed=seed + 1, replay_from=WARMUP_S)]
    merged.sort(key=lambda r: r.arrival_s)
    requests = [replace(r, index=i) for i, r in enumerate(merged)]
    rows: list[dict[str, Any]] = []
    for t in sorted({current, SEED_THRESHOLD, *thresholds}):
        got = run(hot.settings, requests, warmup_s=WARMUP_S, window_s=window, slo=slo_hot, seed=seed,
                  router_threshold=t, cold=cold.settings)
        if slo_cold != slo_hot:  # goodput of the cold path within its own SLOs
            cold_only = run(hot.settings, requests, warmup_s=WARMUP_S, window_s=window, slo=slo_cold, seed=seed,
                            router_threshold=t, cold=cold.settings)["cold"]
            got["cold"] = cold_only
        rows.append({"threshold": t, "hot": got["hot"].to_dict(), "cold": got["cold"].to_dict(),
                     "goodput_qps": round((got["hot"].goodput_qps or 0.0) + (got["cold"].goodput_qps or 0.0), 5),
                     "labels": [x for x, v in (("current", current), ("seed rules", SEED_THRESHOLD)) if v == t]})
    top = max(r["goodput_qps"] for r in rows)
    near = [r for r in rows if r["goodput_qps"] >= 0.98 * top]
    def hot_p99(r: dict[str, Any]) -> float:
        v = r["hot"]["p99_ttft_s"]
        return float("inf") if v is None else float(v)

    best = min(near, key=hot_p99)
    cur = next(r for r in rows if r["threshold"] == current)
    if cur in near and hot_p99(cur) <= 1.05 * hot_p99(best):  # keep the current one unless clearly beaten
        best = cur
    return {"current": current, "seed_rules": SEED_THRESHOLD, "best": best["threshold"], "candidates": rows,
            "note": "hot P99 TTFT is the tie-break among thresholds within 2% of the best goodput"}
