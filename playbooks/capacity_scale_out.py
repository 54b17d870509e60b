"""capacity_scale_out: one engine carries more than one machine should, or its sequence slots are full
while its KV cache still has room."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence
from playbooks.pool import POOL_DEFAULTS, pool_size, replica_scale_out


class CapacityScaleOut(Playbook):
    id = "capacity_scale_out"
    title = "Capacity: scale out"
    severity = "warning"
    signals = ("qps", "batch_utilization", "waiting_mean", "waiting", "kv_cache_usage_max", "kv_cache_usage")
    alerts = ("VllmCapacityScaleOut",)
    defaults: ClassVar[dict[str, float]] = {
        "qps": 100.0,  # requests per second one machine should carry
        "slots_saturated_ratio": 0.98,  # batch utilization at which the sequence slots count as full
        "waiting": 0.0,
        "kv_headroom_ratio": 0.75,  # KV usage below this leaves room for more sequences
        "max_num_seqs_raise_factor": 1.5,
        **POOL_DEFAULTS,  # a role's replicas as one pool (playbooks/pool.py): when a replica is added
    }
    for_s = 300.0
    runbook = """\
**What it means.** Either one engine (one machine) serves more than 100 requests per second, the point
where the seed article moves to tensor-parallel degree 2, or every sequence slot is taken
(`running` at `max_num_seqs` or at the router's cap) with requests waiting while the KV cache still has
room (usage under 75%). The engine is not failing, but the next rise in load turns into queueing and
tail latency. KV-bound saturation (KV usage high) is `kv_pressure`, not this.

**Confirm by hand.** `sum(rate(vllm:request_success_total[5m]))` for QPS;
`vllm:num_requests_running` against `--max-num-seqs` (or `/server_info`); `vllm:num_requests_waiting > 0`;
`vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` before 0.11) below 0.75; the stats log line's
`Running: N reqs, Waiting: M reqs, GPU KV cache usage: X%`.

**Remedies.** Scale out: relaunch with `--tensor-parallel-size 2` (or double the current degree), or add
a replica behind the router. When the slots are full with KV to spare, relaunching with a higher
`--max-num-seqs` is the cheaper third option (watch `kv_pressure` afterwards).

**A pool of replicas.** When the engine has same-role peers, replicas are added only when the pool, not
this one replica, is saturated, by llm-d's workload-variant-autoscaler rule: a replica is saturated at
KV usage >= 0.80 or >= 5 waiting; across the others, mean spare KV under 0.10 or mean spare queue under 3
(or none left) means more replicas; none while a replica is still starting (the doctor acting on it, or up
under 5 minutes: its capacity is coming, and nothing else is done meanwhile). How many: enough to serve the
pool's demand (its completions, its queue's growth over the last 2 minutes and its backlog drained within
5 minutes) at 80% of what a saturated replica completes, at least one and at most the pool's size again
per decision (AIBrix's 2x rate limit), and never more than the free GPUs hold (the doctor trims the count
to its GPU budget). A pool proposes one action, on its first engine (the anchor), however many replicas
find it saturated; it scales by replicas, never by a tensor-parallel relaunch of one member. A pool with
room is spread better instead (`replica_imbalance`); giving replicas back is `capacity_scale_in`.
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress:
            return None
        p = view.params
        qps = view.above("qps", "qps")
        slots = self._slots(view)
        if qps is None and slots is None:
            return None
        evidence: list[Evidence] = []
        parts: list[str] = []
        if qps is not None:
            evidence.append(Evidence("qps", qps.value, qps.threshold, view.window_s, ">",
                                     "more than one machine's share"))
            parts.append(f"{qps.value:.4g} requests/s on one engine (> {p['qps']:g})")
        if slots is not None:
            evidence.extend(slots)
            cap = view.value("seq_cap")
            limit = f": the sequence cap ({cap:g}) is the limit" if cap is not None and view.cap_binds() else ""
            parts.append(f"sequence slots full ({float(slots[0].value or 0):.0%}) with requests waiting and KV at "
                         f"{float(slots[2].value or 0):.0%}{limit}")
        agreeing = (1 if qps is not None else 0) + (1 if slots is not None else 0)
        return Condition("; ".join(parts), tuple(evidence), agreeing=agreeing, considered=2,
                         details={"cause": "both" if qps and slots else ("qps" if qps else "slots")})

    def _slots(self, view: EngineView) -> list[Evidence] | None:
        """Batch utilization at the cap, requests waiting, KV under the headroom threshold (all three known)."""
        p = view.params
        batch = view.value("batch_utilization")
        kv_signal = view.pick("kv_cache_usage_max", "kv_cache_usage")
        kv = view.value(kv_signal)
        waiting = view.above(view.pick("waiting_mean", "waiting"), "waiting")
        if batch is None or kv is None or waiting is None:
            return None
        full = p["slots_saturated_ratio"] * (1 - view.hysteresis) if view.active else p["slots_saturated_ratio"]
        room = p["kv_headroom_ratio"] * (1 + view.hysteresis) if view.active else p["kv_headroom_ratio"]
        if batch < full or kv >= room:
            return None
        return [Evidence("batch_utilization", batch, p["slots_saturated_ratio"], view.window_s, ">=",
                         view.signals.reasons.get("batch_utilization", "")),
                waiting,
                Evidence(kv_signal, kv, p["kv_headroom_ratio"], view.window_s, "<", "KV headroom left")]

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        tp = getattr(view.config, "tensor_parallel_size", None)  # not in EngineConfigView yet
        target_tp = int(tp) * 2 if isinstance(tp, int) and tp > 0 else 2
        shards = Action("scale_out", view.name, {"tensor_parallel_size": target_tp},
                        inverse={"tensor_parallel_size": tp if isinstance(tp, int) else 1}, risk="medium",
                        description=f"relaunch with --tensor-parallel-size {target_tp}")
        replica, why_not = replica_scale_out(view, view.params)
        current = view.config.max_num_seqs
        more_seqs = [Action("relaunch", view.name,
                            {"max_num_seqs": int(current * view.params["max_num_seqs_raise_factor"])},
                            inverse={"max_num_seqs": current}, risk="medium",
                            description="more sequence slots: the KV cache has room for them")] \
            if condition.details.get("cause") in ("slots", "both") and current else []
        if pool_size(view) >= 2:
            # a pool scales by replicas, judged as a whole: nothing while one is starting, spread when it has room
            if replica is not None:
                return [replica, *more_seqs]
            return [] if "starting" in why_not else more_seqs
        return [shards, *([replica] if replica is not None else []), *more_seqs]


PLAYBOOK = CapacityScaleOut()
