"""A role's replicas judged as one pool, by llm-d workload-variant-autoscaler's spare-capacity rule.

A replica is saturated at KV usage >= 0.80 or >= 5 requests waiting. Across the replicas that are not, the
pool's spare KV is the mean of (0.80 - usage) and its spare queue the mean of (5 - waiting); the pool needs
one more replica when every replica is saturated, or spare KV < 0.10, or spare queue < 3. It may lose one
only when its load, spread over one fewer replica, stays under those triggers. No scale-up while a replica
is still starting (the doctor acting on it, or up for less than `starting_s`): its capacity is coming.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from playbooks.base import EngineView

POOL_DEFAULTS: Mapping[str, float] = {
    "pool_kv_saturated_ratio": 0.80,  # a replica at this KV usage is saturated (WVA)
    "pool_queue_saturated": 5.0,  # ... or with this many requests waiting
    "pool_kv_spare_ratio": 0.10,  # scale up when the pool's mean spare KV is under this
    "pool_queue_spare": 3.0,  # ... or its mean spare queue under this
    "pool_starting_s": 300.0,  # a replica up for less than this is still starting
}


@dataclass(frozen=True)
class PoolState:
    """What the rule saw: replicas, the saturated ones, the spares, who is starting, and the verdict."""

    replicas: int
    saturated: int
    spare_kv: float | None  # None when every replica is saturated
    spare_queue: float | None
    starting: tuple[str, ...]
    scale_up: bool

    def describe(self) -> str:
        spare = ("every replica saturated" if self.spare_kv is None or self.spare_queue is None else
                 f"spare KV {self.spare_kv:.2f}, spare queue {self.spare_queue:.1f} across the unsaturated")
        return f"{self.saturated} of {self.replicas} replicas saturated, {spare}"


def pool_of(view: EngineView) -> list[EngineView]:
    """The engine and its same-role peers (a role-less engine is a pool of one)."""
    if view.role is None:
        return [view]
    return [view, *(p for p in view.peers if p.role == view.role and p.name != view.name)]


def _kv(v: EngineView) -> float:
    return v.value(v.pick("kv_cache_usage_max", "kv_cache_usage")) or 0.0


def _queue(v: EngineView) -> float:
    return v.value(v.pick("waiting_mean", "waiting")) or 0.0


def is_starting(v: EngineView, params: Mapping[str, float]) -> bool:
    """The doctor is (re)launching it, or it has been up for less than `pool_starting_s`."""
    uptime = v.value("uptime_s")
    return v.change_in_progress or (uptime is not None and uptime < params["pool_starting_s"])


def judge(pool: Sequence[EngineView], params: Mapping[str, float]) -> PoolState:
    """WVA's verdict on `pool`: the healthy replicas not starting are its capacity; one starting blocks the
    scale-up (an unhealthy one is not capacity, and is engine_down's to relaunch)."""
    starting = tuple(v.name for v in pool if is_starting(v, params))
    ready = [v for v in pool if v.name not in starting and v.signals.health == "ok"]
    kv_max, queue_max = params["pool_kv_saturated_ratio"], params["pool_queue_saturated"]
    free = [v for v in ready if _kv(v) < kv_max and _queue(v) < queue_max]
    spare_kv = sum(kv_max - _kv(v) for v in free) / len(free) if free else None
    spare_queue = sum(queue_max - _queue(v) for v in free) / len(free) if free else None
    short = spare_kv is None or spare_queue is None or spare_kv < params["pool_kv_spare_ratio"] or \
        spare_queue < params["pool_queue_spare"]
    return PoolState(len(pool), len(ready) - len(free), spare_kv, spare_queue, starting,
                     scale_up=bool(ready) and short and not starting)


def fits_on_one_fewer(pool: Sequence[EngineView], params: Mapping[str, float]) -> bool:
    """Whether the pool's load, spread over one replica fewer, leaves it above the scale-up triggers."""
    if len(pool) < 2 or any(is_starting(v, params) or v.signals.health != "ok" for v in pool):
        return False
    n = len(pool) - 1
    kv = sum(_kv(v) for v in pool) / n
    queue = sum(_queue(v) for v in pool) / n
    return params["pool_kv_saturated_ratio"] - kv >= params["pool_kv_spare_ratio"] and \
        params["pool_queue_saturated"] - queue >= params["pool_queue_spare"]
