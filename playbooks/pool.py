"""A role's replicas judged as one pool, by llm-d workload-variant-autoscaler's spare-capacity rule.

A replica is saturated at KV usage >= 0.80 or >= 5 requests waiting. Across the replicas that are not, the
pool's spare KV is the mean of (0.80 - usage) and its spare queue the mean of (5 - waiting); the pool needs
more replicas when every replica is saturated, or spare KV < 0.10, or spare queue < 3. No scale-up while a
replica is still starting (the doctor acting on it, or up for less than `starting_s`): its capacity is coming.

How many (`needed`): the replicas that serve the pool's demand at `pool_target_utilization_ratio` of what a
saturated replica completes, demand being the completions, the queue's growth and its backlog drained within
`pool_drain_s`; at least one, at most the pool's size again per decision (AIBrix's 2x rate limit). The GPU
budget caps it where the free GPUs are known (the doctor's executor).

Scale-in (`shrink`): one replica the doctor added, only when the pool's load spread over one fewer stays under
the scale-up triggers with the same headroom, no replica is starting and the newest has been up
`pool_scale_in_cooldown_s` (AIBrix's scale-down cooldown after a scale-out).
The pool's decisions target its anchor (the first name in it), so the replicas' findings propose one action.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from playbooks.base import EngineView
from playbooks.model import Action

POOL_DEFAULTS: Mapping[str, float] = {
    "pool_kv_saturated_ratio": 0.80,  # a replica at this KV usage is saturated (WVA)
    "pool_queue_saturated": 5.0,  # ... or with this many requests waiting
    "pool_kv_spare_ratio": 0.10,  # scale up when the pool's mean spare KV is under this
    "pool_queue_spare": 3.0,  # ... or its mean spare queue under this
    "pool_starting_s": 300.0,  # a replica up for less than this is still starting
    "pool_target_utilization_ratio": 0.8,  # size a scale-out so each replica serves this share of its capacity
    "pool_drain_s": 300.0,  # ... and the queue already waiting drains within this long
    "pool_growth_window_s": 120.0,  # the queue's growth is measured over this much history
    "pool_max_growth_ratio": 1.0,  # add at most this share of the pool per decision (1: double it, AIBrix)
    "pool_scale_in_cooldown_s": 300.0,  # no scale-in until the newest replica has been up this long (AIBrix)
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


@dataclass(frozen=True)
class Need:
    """How many replicas a scale-out adds, and the numbers it was sized from."""

    add: int
    why: str


@dataclass(frozen=True)
class Shrink:
    """The scale-in verdict: the replica to remove (None: keep them all), why, and the load on one fewer."""

    victim: str | None
    why: str
    kv: float | None = None  # mean KV usage, queue and batch utilization spread over one fewer replica
    queue: float | None = None
    batch: float | None = None


def _evaluation(view: EngineView) -> list[EngineView]:
    """Every view of `view`'s evaluation as doctor.pipeline.build_views made them (view.memo["views"]); without
    that, `view` and its peers."""
    return view.memo.get("views") or [view, *view.peers]  # type: ignore[return-value]


def _members(view: EngineView) -> list[EngineView]:
    """Every engine in `view`'s role in its evaluation (_evaluation), found once per evaluation."""
    key = ("pool members", view.role)
    found = view.memo.get(key)
    if found is None:
        found = view.memo[key] = [v for v in _evaluation(view) if v.role == view.role]
    return found  # type: ignore[return-value]


def pool_of(view: EngineView) -> list[EngineView]:
    """The engine and its same-role peers (a role-less engine is a pool of one)."""
    if view.role is None:
        return [view]
    return [view, *(p for p in _members(view) if p.name != view.name)]


def pool_size(view: EngineView) -> int:
    """len(pool_of(view)), without building the list."""
    return 1 if view.role is None else len(_members(view))


def pool_anchor(view: EngineView) -> str:
    """anchor(pool_of(view)), found once per pool."""
    if view.role is None:
        return view.name
    key = ("pool anchor", view.role)
    if key not in view.memo:
        view.memo[key] = anchor(_members(view))
    return str(view.memo[key])


def deployment_anchor(view: EngineView) -> str:
    """The first engine by name of the whole evaluation: where a finding about what every engine shares (the
    router in front of them) is reported once."""
    key = ("deployment anchor",)
    if key not in view.memo:
        view.memo[key] = min(v.name for v in _evaluation(view))
    return str(view.memo[key])


def anchor(pool: Sequence[EngineView]) -> str:
    """The engine a pool's decisions target (its first name): one action however many replicas propose it."""
    return min(v.name for v in pool)


def added(pool: Sequence[EngineView]) -> list[str]:
    """Replicas the doctor's launcher added to the pool (`hot-r2` for `hot`), newest (highest number) first."""
    names = {v.name for v in pool}
    out = []
    for name in names:
        stem, sep, tail = name.rpartition("-r")
        if sep and tail.isdigit() and stem in names:
            out.append((int(tail), name))
    return [n for _, n in sorted(out, reverse=True)]


def _kv(v: EngineView) -> float:
    return v.value(v.pick("kv_cache_usage_max", "kv_cache_usage")) or 0.0


def _queue(v: EngineView) -> float:
    return v.value(v.pick("waiting_mean", "waiting")) or 0.0


def is_starting(v: EngineView, params: Mapping[str, float]) -> bool:
    """The doctor is (re)launching it, or it has been up for less than `pool_starting_s`."""
    uptime = v.value("uptime_s")
    return v.change_in_progress or (uptime is not None and uptime < params["pool_starting_s"])


def _saturated(v: EngineView, params: Mapping[str, float]) -> bool:
    return _kv(v) >= params["pool_kv_saturated_ratio"] or _queue(v) >= params["pool_queue_saturated"]


def judge(pool: Sequence[EngineView], params: Mapping[str, float]) -> PoolState:
    """WVA's verdict on `pool`: the healthy replicas not starting are its capacity; one starting blocks the
    scale-up (an unhealthy one is not capacity, and is engine_down's to relaunch)."""
    starting = tuple(v.name for v in pool if is_starting(v, params))
    ready = [v for v in pool if v.name not in starting and v.signals.health == "ok"]
    kv_max, queue_max = params["pool_kv_saturated_ratio"], params["pool_queue_saturated"]
    free = [v for v in ready if not _saturated(v, params)]
    spare_kv = sum(kv_max - _kv(v) for v in free) / len(free) if free else None
    spare_queue = sum(queue_max - _queue(v) for v in free) / len(free) if free else None
    short = spare_kv is None or spare_queue is None or spare_kv < params["pool_kv_spare_ratio"] or \
        spare_queue < params["pool_queue_spare"]
    return PoolState(len(pool), len(ready) - len(free), spare_kv, spare_queue, starting,
                     scale_up=bool(ready) and short and not starting)


def queue_growth(v: EngineView, window_s: float) -> float:
    """Requests per second the engine's queue grew by over the last `window_s` of history (0 when it shrank or
    there is under half of that window to judge from)."""
    now_value = v.value("waiting")
    points = list(v.history.series("waiting", window_s))
    if now_value is not None:
        points.append((v.now, now_value))
    if len(points) < 2 or points[-1][0] - points[0][0] < window_s / 2:
        return 0.0
    (t0, w0), (t1, w1) = points[0], points[-1]
    return max(0.0, (w1 - w0) / (t1 - t0))


def needed(pool: Sequence[EngineView], params: Mapping[str, float]) -> Need:
    """The replicas a saturated pool needs (see the module docstring), at least 1, at most the growth cap."""
    ready = [v for v in pool if not is_starting(v, params) and v.signals.health == "ok"]
    cap_n = max(1, math.floor(len(pool) * params["pool_max_growth_ratio"] + 1e-9))
    saturated = [v for v in ready if _saturated(v, params) and (v.value("qps") or 0.0) > 0]
    if not ready or not saturated or any(v.value("qps") is None for v in ready):
        return Need(1, "one more (WVA's step): no saturated replica shows what one completes")
    capacity = sum(v.value("qps") or 0.0 for v in saturated) / len(saturated)
    served = sum(v.value("qps") or 0.0 for v in ready)
    growth = sum(queue_growth(v, params["pool_growth_window_s"]) for v in ready)
    backlog = sum(_queue(v) for v in ready)
    demand = served + growth + backlog / params["pool_drain_s"]
    by_rate = math.ceil(demand / (capacity * params["pool_target_utilization_ratio"]) - 1e-9)
    by_kv = math.ceil(sum(_kv(v) for v in ready) / (params["pool_kv_saturated_ratio"] - params["pool_kv_spare_ratio"])
                      - 1e-9)
    want = max(by_rate, by_kv) - len(ready)
    add = min(max(1, want), cap_n)
    why = (f"demand {demand:.3g} req/s ({served:.3g} served + {growth:.3g} queue growth + {backlog:g} waiting "
           f"over {params['pool_drain_s']:g} s) at {params['pool_target_utilization_ratio']:.0%} of {capacity:.3g} "
           f"req/s a saturated replica completes: {max(by_rate, by_kv)} replicas")
    if want > cap_n:
        why += f"; at most {cap_n} more per decision"
    return Need(add, why)


def replica_scale_out(view: EngineView, params: Mapping[str, float]) -> tuple[Action | None, str]:
    """The replica scale-out `view`'s pool needs, or None and why not (the pool has room, or a replica is still
    starting). A pool of one adds one replica for itself, as before pools were judged."""
    if pool_size(view) < 2:
        return Action("scale_out", view.name, {"add_replicas": 1}, inverse={"add_replicas": -1}, risk="medium",
                      description="add a replica behind the router"), ""
    if view.show_weak:  # its own weak signals count (a pending condition's report): judged for it alone
        return _pool_scale_out(pool_of(view), view.role, params)
    key = ("replica_scale_out", view.role, tuple(sorted(params.items())))  # the same for every replica of the pool
    if key not in view.memo:
        view.memo[key] = _pool_scale_out(pool_of(view), view.role, params)
    return view.memo[key]  # type: ignore[return-value]


def _pool_scale_out(pool: Sequence[EngineView], role: str | None,
                    params: Mapping[str, float]) -> tuple[Action | None, str]:
    state = judge(pool, params)
    if not state.scale_up:
        why = (f"{', '.join(state.starting)} still starting: its capacity is coming" if state.starting else
               f"the {role} pool has room ({state.describe()}): spread the load instead")
        return None, why
    need = needed(pool, params)
    return Action("scale_out", anchor(pool), {"add_replicas": need.add}, inverse={"add_replicas": -need.add},
                  risk="medium", description=f"add {need.add} replica(s): the {role} pool is saturated "
                  f"({state.describe()}); {need.why}"), ""


def fits_on_one_fewer(pool: Sequence[EngineView], params: Mapping[str, float]) -> bool:
    """Whether the pool's load, spread over one replica fewer, leaves it above the scale-up triggers."""
    return _spread(pool, params)[0]


def _spread(pool: Sequence[EngineView], params: Mapping[str, float]) \
        -> tuple[bool, float | None, float | None, float | None]:
    """(fits, mean KV, mean queue, mean batch utilization) of the pool's load spread over one fewer replica."""
    if len(pool) < 2 or any(is_starting(v, params) or v.signals.health != "ok" for v in pool):
        return False, None, None, None
    n = len(pool) - 1
    kv = sum(_kv(v) for v in pool) / n
    queue = sum(_queue(v) for v in pool) / n
    batches = [v.value("batch_utilization") for v in pool]
    batch = sum(b for b in batches if b is not None) / n if all(b is not None for b in batches) else None
    fits = params["pool_kv_saturated_ratio"] - kv >= params["pool_kv_spare_ratio"] and \
        params["pool_queue_saturated"] - queue >= params["pool_queue_spare"] and \
        (batch is None or batch <= params["pool_target_utilization_ratio"])
    return fits, kv, queue, batch


def shrink(pool: Sequence[EngineView], params: Mapping[str, float]) -> Shrink:
    """The replica a pool can give back now, or why none (see the module docstring)."""
    removable = added(pool)
    if len(pool) < 2 or not removable:
        return Shrink(None, "no replica the doctor added")
    starting = [v.name for v in pool if is_starting(v, params)]
    if starting:
        return Shrink(None, f"{', '.join(sorted(starting))} still starting")
    uptimes = [v.value("uptime_s") for v in pool]
    if any(u is None for u in uptimes):
        return Shrink(None, "a replica's uptime is unknown: when the last scale-out was cannot be told")
    youngest = min(u for u in uptimes if u is not None)
    if youngest < params["pool_scale_in_cooldown_s"]:
        return Shrink(None, f"the newest replica is up {youngest:.0f} s: a scale-out within the scale-in cooldown "
                            f"({params['pool_scale_in_cooldown_s']:g} s)")
    fits, kv, queue, batch = _spread(pool, params)
    if not fits:
        return Shrink(None, "the load does not fit on one fewer replica", kv, queue, batch)
    return Shrink(removable[0], f"the load fits on {len(pool) - 1} replicas", kv, queue, batch)
