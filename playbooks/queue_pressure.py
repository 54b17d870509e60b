"""queue_pressure: requests pile up waiting for the engine (or for the router's in-flight cap)."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence
from playbooks.pool import POOL_DEFAULTS, pool_size, replica_scale_out


class QueuePressure(Playbook):
    id = "queue_pressure"
    title = "Queue pressure"
    severity = "warning"
    signals = ("waiting_mean", "waiting", "p95_queue_s", "router_queue_p99_s", "batch_utilization", "kv_cache_usage",
               "seq_cap")
    alerts = ("VllmQueuePressure", "VllmQueueTimeHigh")
    defaults: ClassVar[dict[str, float]] = {
        "waiting": 5.0, "p95_queue_s": 1.0, "router_queue_p99_s": 1.0, "engine_headroom_ratio": 0.9,
        "max_in_flight_factor_ratio": 1.5, "length_limit_tokens": 8192.0, "length_limit_expires_s": 3600.0,
        "kv_headroom_ratio": 0.75, "max_num_seqs_raise_factor": 1.5,
        # The cold path queues documents behind a small batch by design: the simulator's healthy cold engine
        # (2 slots, 7-16K-token documents) reads a P95 queue time of 3.5 s at 45-70% load over 5-minute windows.
        "cold_p95_queue_s": 5.0,
    }
    # `waiting` is a gauge read at one instant and queue time follows bursts: the simulator's healthy hot engine
    # at 80% load shows P95 queue times over 1 s for a minute at a time. Two minutes is pressure, not a burst.
    for_s = 120.0
    runbook = """\
**What it means.** More than 5 requests wait in the engine's queue (on average over the window's reads),
its P95 queue time is 1 s or more (5 s on a cold engine, which queues documents behind a small batch by design)
(`vllm:request_queue_time_seconds`: time from arrival at the engine to first scheduling), or the
router's own P99 queue time is 1 s or more. Demand exceeds what the engine admits: its sequence slots
(`max_num_seqs`) or KV blocks are full, or the router's in-flight cap holds requests back while the
engine still has room. Time to first token grows with the queue.

**Confirm by hand.** `vllm:num_requests_waiting > 5` and
`histogram_quantile(0.95, sum by (le) (rate(vllm:request_queue_time_seconds_bucket[5m]))) >= 1`; with
`vllm:num_requests_running` against `max_num_seqs` and `vllm:kv_cache_usage_perc` to see which limit
binds; the stats log line's `Waiting: N reqs`; the router's policy (`GET /policy`) for max in flight.

When `running` is held at the sequence cap in every read of the window (`max_num_seqs` from the
config, `/server_info` or the start-up log, or seen as a cap), the report says so: the sequence cap is
the limit, not the batching.

**Remedies.** When the router's cap is what binds (the engine has free slots and KV), raise the
engine's max in flight at the router. When the engine itself is full, add capacity (a replica or
more tensor-parallel shards), and meanwhile shed load with the emergency length limit (prompts over
8192 tokens get 413 for an hour at most; lifted early once it refuses nothing, or only a trickle, and
no engine has a queue). An engine with same-role replicas is one of a pool: replicas are added only when
the pool is saturated, as many as its demand needs, in one action on the pool's first engine
(`capacity_scale_out` says how), and nothing is done while a replica is still starting.
"""

    def _at_least(self, view: EngineView, signal: str, param: str | None = None) -> Evidence | None:
        value = view.value(signal)
        if value is None:
            return None
        threshold = view.params[param or signal]
        limit = threshold * (1 - view.hysteresis) if view.active else threshold
        return Evidence(signal, value, threshold, view.window_s, ">=") if value >= limit else None

    def _router_bound(self, view: EngineView) -> bool:
        """The router's in-flight cap binds while the engine still has free slots and KV."""
        cap = view.config.router_max_in_flight
        running = view.value("running")
        if not cap or running is None or running < cap * view.params["engine_headroom_ratio"]:
            return False
        headroom = view.params["engine_headroom_ratio"]
        batch, kv = view.value("batch_utilization"), view.value("kv_cache_usage")
        return batch is not None and batch < headroom and (kv is None or kv < headroom)

    def _kv_room(self, view: EngineView) -> bool:
        kv = view.value(view.pick("kv_cache_usage_max", "kv_cache_usage"))
        return kv is not None and kv < view.params["kv_headroom_ratio"] and not view.value("preemptions_per_s")

    def check(self, view: EngineView) -> Condition | None:
        waiting_signal = view.pick("waiting_mean", "waiting")
        queue_param = "cold_p95_queue_s" if view.role == "cold" else "p95_queue_s"
        found = [e for e in (view.above(waiting_signal, "waiting"), self._at_least(view, "p95_queue_s", queue_param),
                             self._at_least(view, "router_queue_p99_s")) if e is not None]
        if not found:
            return None
        considered = sum(view.value(s) is not None for s in (waiting_signal, "p95_queue_s", "router_queue_p99_s"))
        parts = {"waiting": "{:g} requests waiting", "waiting_mean": "{:.3g} requests waiting on average",
                 "p95_queue_s": "P95 queue time {:.2g}s", "router_queue_p99_s": "router P99 queue time {:.2g}s"}
        summary = " and ".join(parts[e.signal].format(e.value) for e in found)
        evidence = list(found)
        cap_binds = view.cap_binds()
        if cap_binds:
            cap = float(view.value("seq_cap") or 0)
            source = view.signals.reasons.get("seq_cap", "")
            evidence.append(Evidence("running_min", view.value("running_min"), cap, view.window_s, ">=",
                                     f"running held at the sequence cap ({source})"))
            summary += (f": the sequence cap is the limit (running held at {cap:g} in every read"
                        + (", KV has room)" if self._kv_room(view) else ")"))
        return Condition(summary, tuple(evidence), agreeing=len(found), considered=max(considered, len(found)),
                         details={"router_bound": "yes" if self._router_bound(view) else "no",
                                  "cap_binds": "yes" if cap_binds else "no",
                                  "kv_room": "yes" if self._kv_room(view) else "no"})

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        p = view.params
        cap = view.config.router_max_in_flight
        shed = Action("length_limit", "router",
                      {"max_tokens": int(p["length_limit_tokens"]), "expires_in_s": int(p["length_limit_expires_s"])},
                      inverse={"max_tokens": None}, risk="medium",
                      description="shed load: reject prompts over the limit with 413 until it expires")
        scale: Action | None = Action("scale_out", view.name, {"add_replicas": 1}, inverse={"add_replicas": -1},
                                      risk="medium",
                                      description="add capacity: another replica (or more tensor-parallel shards)")
        if pool_size(view) >= 2:  # a pool is judged as a whole (playbooks.pool): one action, sized to the need
            pooled, why_not = replica_scale_out(view, {**POOL_DEFAULTS, **p})
            if pooled is None and "starting" in why_not:
                return []  # a replica is still starting: its capacity is coming
            scale = pooled
        if condition.details.get("router_bound") == "yes" and cap:
            raise_cap = Action("set_max_in_flight", "router",
                               {"engine": view.name, "max_in_flight": int(cap * p["max_in_flight_factor_ratio"]) + 1},
                               inverse={"engine": view.name, "max_in_flight": cap}, risk="low",
                               description="the router's cap holds requests back while the engine has room")
            return [raise_cap, *_some(scale), shed]
        current = view.config.max_num_seqs
        if condition.details.get("cap_binds") == "yes" and condition.details.get("kv_room") == "yes" and current:
            more = Action("relaunch", view.name, {"max_num_seqs": int(current * p["max_num_seqs_raise_factor"])},
                          inverse={"max_num_seqs": current}, risk="medium",
                          description="more sequence slots: the cap binds and the KV cache has room for them")
            return [*_some(scale), more, shed]
        return [*_some(scale), shed]


def _some(action: Action | None) -> list[Action]:
    return [] if action is None else [action]


PLAYBOOK = QueuePressure()
