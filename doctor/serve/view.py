"""`GET /v1/state` and `GET /v1/actions`: what the latest cycle saw, short histories for sparklines, the router's
policy, the actions and the alerts waiting for the doctor's reading.

`GET /v1/state?histograms=ENGINE` adds that engine's raw TTFT, e2e and ITL histograms (cumulative bucket counts
with the scrape's own bounds, one entry per kept read) so the TUI can draw its latency heatmap from the deltas;
the signals alone (quantiles) cannot give that. The TUI's standalone mode builds the same document
(`report_doc`) from its own cycle."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from doctor.engines import EngineRef
from doctor.remedy.queue import ActionStore
from doctor.serve.runner import Daemon

HEATMAP_HISTOGRAMS = ("ttft", "e2e", "itl")
HEATMAP_READS = 240  # all the snapshot store keeps per engine
SPARK_SIGNALS = ("qps", "p99_ttft_s", "p99_e2e_s", "p99_itl_s", "waiting", "running", "kv_cache_usage",
                 "long_prompt_share", "generation_tokens_per_s", "batch_utilization")


def actions_doc(store: ActionStore, recent: int = 50) -> dict[str, Any]:
    """Pending and recent action records (whole records: `doctor actions --daemon` prints them like the state
    directory's)."""
    store.expire()
    return {"pending": [r.to_dict() for r in store.pending()], "recent": [r.to_dict() for r in store.recent(recent)]}


def _history(state_dir: Path, engines: list[str], points: int, since_s: float) -> dict[str, dict[str, list[Any]]]:
    from collectors.history import SignalHistory

    hist = SignalHistory(state_dir / "history.jsonl")
    out: dict[str, dict[str, list[Any]]] = {}
    for name in engines:
        out[name] = {s: [[round(t, 3), v] for t, v in hist.series(name, s, since_s)[-points:]] for s in SPARK_SIGNALS}
    return out


def histogram_series(state_dir: Path, engine: str, url: str, points: int) -> dict[str, list[list[Any]]]:
    """The last `points` kept reads of one engine's latency histograms: name -> [[t, bounds, cumulative], ...],
    oldest first (an +Inf bound as the string "+Inf")."""
    import math

    from collectors.snapstore import SnapshotStore

    snaps = SnapshotStore(state_dir / "snapshots.jsonl").load(engine, url)[-points:]
    out: dict[str, list[list[Any]]] = {}
    for name in HEATMAP_HISTOGRAMS:
        out[name] = [[round(s.timestamp, 3), ["+Inf" if math.isinf(b) else b for b in h.bounds], list(h.cumulative)]
                     for s in snaps if (h := s.histograms.get(name)) is not None]
    return out


async def router_policy(url: str | None, token: str | None, timeout_s: float) -> dict[str, Any] | None:
    if not url:
        return None
    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
            r = await client.get(url.rstrip("/") + "/router/policy",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
        doc = r.json() if r.status_code == 200 else {"error": f"HTTP {r.status_code}"}
        return doc if isinstance(doc, dict) else {"error": "not a JSON object"}
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


async def state_doc(daemon: Daemon, store: ActionStore, *, points: int, router: str | None,
                    router_token: str | None = None, histograms: str | None = None) -> dict[str, Any]:
    """The whole state, for the TUI and people (`histograms`: the engine whose raw latency histograms to add)."""
    report = daemon.latest.report if daemon.latest is not None else None
    doc = await report_doc(report, daemon.plan.engines, daemon.plan.state_dir, store, points=points,
                           since_s=max(600.0, points * daemon.interval_s * 2), router=router,
                           router_token=router_token, histograms=histograms)
    waiting = [{"fingerprint": w.fingerprint, "alertname": w.entry.alert.alertname, "engine": w.engine,
                "playbook": w.target.playbook, "since": w.entry.received_at, "until": w.deadline}
               for w in daemon.waiting.values()]
    return {**doc, "leader": daemon.leader_state(),
            "cycles": daemon.cycles, "cycle_running": daemon.running, "interval_s": daemon.interval_s,
            "alerts": {"waiting": waiting, "queue_depth": daemon.inbox.depth}}


async def report_doc(report: dict[str, Any] | None, refs: Sequence[EngineRef], state_dir: Path, store: ActionStore, *,
                     points: int, since_s: float, router: str | None, router_token: str | None = None,
                     histograms: str | None = None) -> dict[str, Any]:
    """A cycle's report with each engine's short histories, the router's policy and the actions (the part of the
    state that is not the daemon's own)."""
    names = [e.name for e in refs]
    history = await asyncio.to_thread(_history, state_dir, names, points, since_s)
    engines = []
    for ref in refs:
        seen = next((e for e in (report or {}).get("engines", []) if e["name"] == ref.name), None)
        engines.append({"name": ref.name, "role": ref.role, "url": ref.url, "log": ref.log,
                        **({k: seen[k] for k in ("reachable", "version", "version_profile", "signals", "findings",
                                                 "pending", "errors", "change_in_progress", "events") if k in seen}
                           if seen else {"reachable": None}),
                        "history": history.get(ref.name, {})})
        if histograms == ref.name:
            engines[-1]["histograms"] = await asyncio.to_thread(histogram_series, state_dir, ref.name, ref.url,
                                                                HEATMAP_READS)
    return {
        "generated_at": report["generated_at"] if report else None,
        "status": report["status"] if report else "unknown",
        "engines": engines,
        "findings": report["findings"] if report else [],
        "pending": report["pending"] if report else [],
        "router": {"url": router, "policy": await router_policy(router, router_token, 2.0)},
        "actions": await asyncio.to_thread(actions_doc, store, 20),
    }
