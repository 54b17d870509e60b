"""`GET /v1/state` and `GET /v1/actions`: what the latest cycle saw, short histories for sparklines, the router's
policy, the actions and the alerts waiting for the doctor's reading."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from doctor.remedy.queue import ActionStore
from doctor.serve.runner import Daemon

SPARK_SIGNALS = ("qps", "p99_ttft_s", "p99_e2e_s", "p99_itl_s", "waiting", "running", "kv_cache_usage",
                 "long_prompt_share", "generation_tokens_per_s", "batch_utilization")


def actions_doc(store: ActionStore, recent: int = 50) -> dict[str, Any]:
    """Pending and recent action records (whole records: `doctor actions --daemon` prints them like the state
    directory's)."""
    store.expire()
    return {"pending": [r.to_dict() for r in store.pending()], "recent": [r.to_dict() for r in store.recent(recent)]}


def _history(state_dir: Path, engines: list[str], points: int, since_s: float) -> dict[str, dict[str, list[Any]]]:
    from collectors.history import SignalHistory

    hist = SignalHistory(state_dir / "history.json")
    out: dict[str, dict[str, list[Any]]] = {}
    for name in engines:
        out[name] = {s: [[round(t, 3), v] for t, v in hist.series(name, s, since_s)[-points:]] for s in SPARK_SIGNALS}
    return out


async def _router_policy(url: str | None, token: str | None, timeout_s: float) -> dict[str, Any] | None:
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
                    router_token: str | None = None) -> dict[str, Any]:
    """The whole state, for the TUI and people."""
    report = daemon.latest.report if daemon.latest is not None else None
    names = [e.name for e in daemon.plan.engines]
    since = max(600.0, points * daemon.interval_s * 2)
    history = await asyncio.to_thread(_history, daemon.plan.state_dir, names, points, since)
    engines = []
    for ref in daemon.plan.engines:
        seen = next((e for e in (report or {}).get("engines", []) if e["name"] == ref.name), None)
        engines.append({"name": ref.name, "role": ref.role, "url": ref.url,
                        **({k: seen[k] for k in ("reachable", "version", "version_profile", "signals", "findings",
                                                 "pending", "errors", "change_in_progress") if k in seen}
                           if seen else {"reachable": None}),
                        "history": history.get(ref.name, {})})
    waiting = [{"fingerprint": w.fingerprint, "alertname": w.entry.alert.alertname, "engine": w.engine,
                "playbook": w.target.playbook, "since": w.entry.received_at, "until": w.deadline}
               for w in daemon.waiting.values()]
    return {
        "generated_at": report["generated_at"] if report else None,
        "status": report["status"] if report else "unknown",
        "cycles": daemon.cycles, "cycle_running": daemon.running, "interval_s": daemon.interval_s,
        "engines": engines,
        "findings": report["findings"] if report else [],
        "pending": report["pending"] if report else [],
        "router": {"url": router, "policy": await _router_policy(router, router_token, 2.0)},
        "actions": await asyncio.to_thread(actions_doc, store, 20),
        "alerts": {"waiting": waiting, "queue_depth": daemon.inbox.depth},
    }
