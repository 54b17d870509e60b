"""replica_imbalance: one engine carries far more or far less than the other engines of its role."""

from __future__ import annotations

import math
from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence

LOAD_SIGNALS = ("running", "qps")


class ReplicaImbalance(Playbook):
    id = "replica_imbalance"
    title = "Replica imbalance"
    severity = "warning"
    signals = ("running", "qps", "waiting", "kv_cache_usage")
    alerts = ("VllmReplicaImbalance",)
    defaults: ClassVar[dict[str, float]] = {
        "imbalance_factor": 2.0,  # own load above factor x (or below 1/factor of) the same-role peers' mean
        "loaded_running": 4.0,  # the group counts as loaded when one engine runs this many requests...
        "loaded_qps": 1.0,  # ...or serves this many requests per second
        "kv_gap_ratio": 0.3,  # supporting: KV usage this far from the peers' mean
    }
    for_s = 300.0
    runbook = """\
**What it means.** Engines with the same role are replicas and should carry similar load. This one runs
(or receives) more than twice, or less than half, what its same-role peers do on average, while the
group is loaded. The cause is the routing layer: a sticky or connection-reusing load balancer, a replica
the router does not know is ready, long prompts pinned to one replica. The busy replica queues while
the others idle. Engines of different roles (hot and cold) are not compared, and an engine without a
role is not compared with anything.

**Confirm by hand.** `vllm:num_requests_running` and `sum(rate(vllm:request_success_total[5m]))` per
instance side by side (`by (instance)`); `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` per
instance; the router's per-engine in-flight counts and its routing log.

**Remedies.** Cap the busiest replica's max in flight at the role's mean so the router spills the excess
to its peers; if the busy replica stays out of line, stop routing to it until it drains. For a starved
replica, check that the router has it registered and ready.
"""

    def _group(self, view: EngineView) -> list[EngineView]:
        """Healthy same-role peers (not the engine itself)."""
        if view.role is None:
            return []
        return [p for p in view.peers if p.role == view.role and p.name != view.name and p.signals.health == "ok"]

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress or view.signals.health != "ok":
            return None
        peers = self._group(view)
        if not peers:
            return None
        p = view.params
        loaded = any((e.value("running") or 0) >= p["loaded_running"] or (e.value("qps") or 0) >= p["loaded_qps"]
                     for e in (view, *peers))
        if not loaded:
            return None
        factor = p["imbalance_factor"] * (1 - view.hysteresis) if view.active else p["imbalance_factor"]
        evidence: list[Evidence] = []
        direction = ""
        for signal in LOAD_SIGNALS:
            own = view.value(signal)
            others = [v for v in (e.value(signal) for e in peers) if v is not None]
            if own is None or not others:
                continue
            mean = sum(others) / len(others)
            over = own > mean * factor if mean > 0 else own > 0
            under = mean > 0 and own < mean / factor
            if not (over or under) or (direction and direction != ("over" if over else "under")):
                continue
            direction = "over" if over else "under"
            ratio = own / mean if mean > 0 else math.inf
            limit = mean * p["imbalance_factor"] if over else mean / p["imbalance_factor"]
            evidence.append(Evidence(signal, own, limit, view.window_s, ">" if over else "<",
                                     f"{ratio:.2g}x the mean {mean:.3g} of {len(others)} same-role peer(s)"))
        if not evidence:
            return None
        supporting = self._supporting(view, peers, direction)
        what = "more" if direction == "over" else "less"
        return Condition(f"carries {what} than its {view.role} peers: "
                         + ", ".join(f"{e.signal} {e.value:.3g} ({e.note.split(' of ')[0]})" for e in evidence),
                         (*evidence, *supporting), agreeing=len(evidence) + len(supporting), considered=4,
                         details={"direction": direction})

    def _supporting(self, view: EngineView, peers: list[EngineView], direction: str) -> list[Evidence]:
        """KV usage far from the peers' mean in the same direction; one side waiting while the other does not."""
        out: list[Evidence] = []
        kv = view.value("kv_cache_usage")
        kvs = [v for v in (e.value("kv_cache_usage") for e in peers) if v is not None]
        if kv is not None and kvs:
            mean = sum(kvs) / len(kvs)
            gap = kv - mean if direction == "over" else mean - kv
            if gap >= view.params["kv_gap_ratio"]:
                out.append(Evidence("kv_cache_usage", kv, view.params["kv_gap_ratio"], view.window_s, ">",
                                    f"{gap:.0%} {'above' if direction == 'over' else 'below'} the peers' mean"))
        waiting = view.value("waiting")
        peer_waiting = [e.value("waiting") for e in peers]
        busy, idle = (waiting, peer_waiting) if direction == "over" else (max(
            (w for w in peer_waiting if w is not None), default=None), [waiting])
        if busy is not None and busy > 0 and any(w == 0 for w in idle):
            out.append(Evidence("waiting", waiting, 0.0, view.window_s, ">" if direction == "over" else "==",
                                "requests wait on one replica while another has none"))
        return out

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        group = [view, *self._group(view)]
        running = [(e.value("running") or 0.0, e.name) for e in group]
        mean = sum(r for r, _ in running) / len(running)
        cap = max(1, math.ceil(mean))
        busiest = max(running)[1] if condition.details.get("direction") == "under" else view.name
        return [
            Action("set_max_in_flight", "router", {"engine": busiest, "max_in_flight": cap},
                   inverse={"engine": busiest, "max_in_flight": None}, risk="low",
                   description=f"cap {busiest} at the {view.role} replicas' mean load so the router spreads it"),
            Action("stop_routing", "router", {"engine": busiest}, inverse={"engine": busiest, "resume": True},
                   risk="medium", description=f"drain {busiest} until the load evens out"),
        ]


PLAYBOOK = ReplicaImbalance()
