"""A fixed state document, shaped as `GET /v1/state` returns it (taken from a run against the sim deployment and
trimmed), and a source that replays it: for snapshot tests, which need the same frame every time."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

NOW = 1_764_600_000.0  # 2025-12-01T14:40:00Z


def _history(values: list[float]) -> list[list[float]]:
    return [[NOW - 2 * (len(values) - i), v] for i, v in enumerate(values)]


def _hist(t0: float, n: int) -> list[list[Any]]:
    """`n` reads 2 s apart of a TTFT histogram whose requests get slower over time."""
    bounds: list[Any] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, "+Inf"]
    totals = [0.0] * len(bounds)  # requests per bucket so far
    out = []
    for i in range(n):
        step = [0, 1, 3, 4, 2, 1, 1 if i > n // 2 else 0, 2 if i > 2 * n // 3 else 0, 0, 0]
        totals = [a + b for a, b in zip(totals, step, strict=True)]
        out.append([t0 + 2 * i, bounds, [sum(totals[: k + 1]) for k in range(len(bounds))]])
    return out


HOT_SIGNALS = {
    "health": "ok", "qps": 4.2, "p50_ttft_s": 0.046, "p99_ttft_s": 2.9, "p50_e2e_s": 0.41, "p99_e2e_s": 6.2,
    "batch_utilization": 1.0, "kv_cache_usage": 0.82, "prefix_cache_hit_rate": 0.91, "preemptions_per_s": 0.0,
    "waiting": 7.0, "dram_utilization": 0.64, "fb_used_ratio": 0.9, "length_limit_refusals_total": 12.0,
}
COLD_SIGNALS = {
    "health": "ok", "qps": 0.4, "p50_ttft_s": 0.8, "p99_ttft_s": 1.9, "p50_e2e_s": 2.1, "p99_e2e_s": 4.0,
    "batch_utilization": 0.25, "kv_cache_usage": 0.31, "prefix_cache_hit_rate": 0.55, "preemptions_per_s": 0.0,
    "waiting": 0.0, "dram_utilization": 0.22, "fb_used_ratio": 0.9,
}
LIMIT = {"id": "a-limit", "action": "length_limit", "target": "router",
         "params": {"max_prompt_tokens": 8192, "expires_s": 3600}, "inverse": None, "risk": "low",
         "description": "the router refuses prompts over N tokens with 413 until it expires"}
FINDING = {
    "id": "fnd-0123456789abcdef", "playbook": "long_prompt_share", "title": "Long prompts on the hot path",
    "engine": "hot", "severity": "critical", "confidence": 0.9, "status": "firing", "onset": NOW - 300,
    "summary": "52% of the hot engine's prompts are 5120 tokens or longer", "for_s": 60.0, "held_s": 300.0,
    "evidence": [{"signal": "long_prompt_share", "value": 0.52, "threshold": 0.05, "window_s": 20.0,
                  "comparison": ">"},
                 {"signal": "p99_ttft_s", "value": 2.9, "threshold": 1.0, "window_s": 20.0, "comparison": ">"}],
    "remedies": [LIMIT], "runbook": "",
}
PENDING = {
    "id": "fnd-fedcba9876543210", "playbook": "kv_pressure", "title": "KV-cache pressure", "engine": "hot",
    "severity": "warning", "confidence": 0.6, "status": "pending", "onset": NOW - 40,
    "summary": "KV cache 82% used with requests waiting", "for_s": 300.0, "held_s": 40.0, "fires_in_s": 260.0,
    "evidence": [{"signal": "kv_cache_usage", "value": 0.82, "threshold": 0.75, "window_s": 20.0, "comparison": ">"}],
    "remedies": [], "runbook": "",
}


def _record(rid: str, status: str, updated: float, **extra: Any) -> dict[str, Any]:
    return {"action": LIMIT, "engine": "hot", "playbook": "long_prompt_share", "finding_id": FINDING["id"],
            "status": status, "reason": extra.pop("reason", ""), "trigger": "serve", "id": rid,
            "created_at": updated - 5, "updated_at": updated, "before": {"long_prompt_share": 0.52}, "after": {},
            "inverse": extra.pop("inverse", None),
            "verify": {"signal": "long_prompt_share", "direction": "down", "target": 0.05, "ratio": None,
                       "within_s": 120.0, "keep_on_fail": False}, "steps": [], **extra}


STATE: dict[str, Any] = {
    "generated_at": "2025-12-01T14:40:00Z", "status": "critical", "cycles": 42, "cycle_running": False,
    "interval_s": 2.0,
    "engines": [
        {"name": "hot", "role": "hot", "url": "http://127.0.0.1:8001", "reachable": True, "version": "0.33.0",
         "version_profile": "0.33", "signals": HOT_SIGNALS, "findings": [FINDING], "pending": [PENDING],
         "errors": [], "change_in_progress": False,
         "events": [{"kind": "prompt_too_long", "engine": "hot", "timestamp": NOW - 10,
                     "message": "This model's maximum context length is 32768 tokens", "details": {}}],
         "history": {"qps": _history([3.0, 3.5, 4.0, 4.1, 4.2, 4.2, 4.0, 4.3]),
                     "p99_ttft_s": _history([0.2, 0.25, 0.3, 0.3, 0.9, 1.8, 2.5, 2.9]),
                     "kv_cache_usage": _history([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.82, 0.82]),
                     "waiting": _history([0, 0, 1, 2, 4, 6, 7, 7])},
         "histograms": {"ttft": _hist(NOW - 60, 30)}},
        {"name": "cold", "role": "cold", "url": "http://127.0.0.1:8002", "reachable": True, "version": "0.33.0",
         "version_profile": "0.33", "signals": COLD_SIGNALS, "findings": [], "pending": [], "errors": [],
         "change_in_progress": False,
         "history": {"qps": _history([0.3, 0.4, 0.4, 0.5, 0.4, 0.4, 0.4, 0.4])}},
    ],
    "findings": [FINDING],
    "pending": [PENDING],
    "router": {"url": "http://127.0.0.1:8000", "policy": {
        "version": 3, "route_threshold_tokens": 16384, "length_limit_tokens": 8192,
        "length_limit_expires_at": NOW + 1800, "batch_timeout_ms": 0, "fairness_window": 10, "max_queue": 1024,
        "upstreams": {"hot": [{"name": "hot", "url": "http://127.0.0.1:8001", "state": "active", "max_in_flight": 256}],
                      "cold": [{"name": "cold", "url": "http://127.0.0.1:8002", "state": "active",
                                "max_in_flight": 256}]},
        "status": {"length_limit_active": True}}},
    "actions": {"pending": [_record("run-pending0001", "pending", NOW - 20,
                                    reason="waiting for `doctor approve` (approve mode)")],
                "recent": [_record("run-verified001", "verified", NOW - 600, reason="long_prompt_share fell to 0.01",
                                   inverse={"action": "length_limit", "target": "router",
                                            "params": {"max_prompt_tokens": None}})]},
    "alerts": {"waiting": [], "queue_depth": 0},
}


class Recorded:
    """Replays STATE (a copy each read); decisions are refused: a recording cannot change."""

    label = "recorded state"
    can_decide = False

    def __init__(self, doc: dict[str, Any] | None = None) -> None:
        self.doc = doc or STATE

    async def state(self, histograms: str | None = None) -> dict[str, Any]:
        return copy.deepcopy(self.doc)

    async def decide(self, verb: str, record_id: str, who: str, reason: str = "") -> dict[str, Any]:
        return {"result": "refused", "text": "a recording cannot change"}

    def events(self) -> AsyncIterator[tuple[str, dict[str, Any]]] | None:
        return None

    async def aclose(self) -> None:
        return None
