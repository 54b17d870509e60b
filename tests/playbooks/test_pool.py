"""A role's replicas as one pool (WVA's spare-capacity rule), and the capacity decision's replica action."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.capacity_scale_in import PLAYBOOK as SCALE_IN
from playbooks.capacity_scale_out import PLAYBOOK
from playbooks.model import Action
from playbooks.pool import (
    POOL_DEFAULTS,
    added,
    anchor,
    fits_on_one_fewer,
    judge,
    needed,
    pool_of,
    replica_scale_out,
    shrink,
)

SLOTS_FULL = {"batch_utilization": 1.0, "waiting": 4.0, "kv_cache_usage": 0.5, "uptime_s": 3600.0}


def replica(name: str, values: Mapping[str, float | None], *, role: str | None = "hot", health: str = "ok",
            change: bool = False) -> EngineView:
    signals = Signals(engine=name, window_s=60.0, health=health, values={"uptime_s": 3600.0, **values})  # type: ignore[arg-type]
    return EngineView(name=name, role=role, signals=signals, params=dict(PLAYBOOK.defaults), now=1000.0,
                      change_in_progress=change)


def with_peers(me: EngineView, *peers: EngineView) -> EngineView:
    pool = (me, *peers)
    return EngineView(name=me.name, role=me.role, signals=me.signals, params=me.params, now=me.now,
                      peers=pool, change_in_progress=me.change_in_progress)


def test_spare_capacity_rule() -> None:
    p = POOL_DEFAULTS
    roomy = [replica("a", {"kv_cache_usage": 0.5, "waiting": 0.0}), replica("b", {"kv_cache_usage": 0.6, "waiting": 1})]
    state = judge(roomy, p)
    assert (state.saturated, state.spare_kv, state.spare_queue, state.scale_up) == (0, pytest.approx(0.25), 4.5,
                                                                                    False)
    # one replica saturated (KV >= 0.80) does not make the pool saturated while the others have room
    one_hot = [replica("a", {"kv_cache_usage": 0.95, "waiting": 9}), *roomy]
    assert judge(one_hot, p).saturated == 1 and not judge(one_hot, p).scale_up
    # spare KV under 0.10 across the unsaturated replicas, or spare queue under 3: one more replica
    assert judge([replica("a", {"kv_cache_usage": 0.75}), replica("b", {"kv_cache_usage": 0.72})], p).scale_up
    assert judge([replica("a", {"waiting": 3.0}), replica("b", {"waiting": 2.5})], p).scale_up
    full = judge([replica("a", {"waiting": 5.0}), replica("b", {"kv_cache_usage": 0.8})], p)
    assert full.scale_up and full.spare_kv is None and "every replica saturated" in full.describe()


def test_no_scale_up_while_a_replica_is_starting() -> None:
    p = POOL_DEFAULTS
    busy = [replica("a", {"waiting": 9.0}), replica("b", {"waiting": 9.0})]
    assert judge(busy, p).scale_up
    for starting in (replica("c", {"uptime_s": 40.0}), replica("c", {}, change=True)):
        state = judge([*busy, starting], p)
        assert state.starting == ("c",) and not state.scale_up
    # an unreachable replica is no capacity and does not block (engine_down relaunches it)
    assert judge([*busy, replica("c", {"uptime_s": None}, health="unreachable")], p).scale_up


def test_scale_in_only_when_the_load_fits_on_one_fewer() -> None:
    p = POOL_DEFAULTS
    light = [replica(n, {"kv_cache_usage": 0.2, "waiting": 0.0}) for n in "abc"]
    assert fits_on_one_fewer(light, p)  # 0.6 KV over 2 replicas: 0.3 each, spare 0.5
    loaded = [replica(n, {"kv_cache_usage": 0.5, "waiting": 1.0}) for n in "abc"]
    assert not fits_on_one_fewer(loaded, p)  # 1.5 KV over 2: 0.75 each, spare 0.05 < 0.10
    queued = [replica(n, {"kv_cache_usage": 0.1, "waiting": 1.5}) for n in "abc"]
    assert not fits_on_one_fewer(queued, p)  # 4.5 waiting over 2: 2.25 each, spare 2.75 < 3
    assert not fits_on_one_fewer(light[:1], p)
    assert not fits_on_one_fewer([*light, replica("d", {"uptime_s": 10.0})], p)


def test_pool_is_the_same_role() -> None:
    me = with_peers(replica("a", {}), replica("b", {}), replica("c", {}, role="cold"))
    assert [v.name for v in pool_of(me)] == ["a", "b"]
    alone = replica("x", {}, role=None)
    assert [v.name for v in pool_of(alone)] == ["x"]


def _replica_actions(view: EngineView) -> list[Action]:
    cond = PLAYBOOK.check(view)
    assert cond is not None
    return [a for a in PLAYBOOK.remedies(view, cond) if "add_replicas" in a.params]


def test_capacity_adds_replicas_only_for_a_saturated_pool() -> None:
    me = replica("a", {**SLOTS_FULL, "waiting": 6.0})
    [alone] = _replica_actions(me)  # a pool of one: as before (after the tensor-parallel relaunch)
    assert (alone.target, alone.params, alone.description) == ("a", {"add_replicas": 1},
                                                               "add a replica behind the router")
    roomy = with_peers(me, replica("b", {"kv_cache_usage": 0.3, "waiting": 0.0}))
    assert _replica_actions(roomy) == []  # the peer has room: spread the load, do not add a replica
    saturated = with_peers(me, replica("b", {"kv_cache_usage": 0.5, "waiting": 4.0}))
    cond = PLAYBOOK.check(saturated)
    assert cond is not None
    remedies = PLAYBOOK.remedies(saturated, cond)
    first = remedies[0]
    assert first.kind == "scale_out" and first.params == {"add_replicas": 1} and first.target == "a"
    assert first.description.startswith("add 1 replica(s): the hot pool is saturated (1 of 2 replicas saturated, "
                                         "spare KV 0.30, spare queue 1.0 across the unsaturated); one more")
    assert not [a for a in remedies if "tensor_parallel_size" in a.params]  # a pool scales by replicas
    starting = with_peers(me, replica("b", {"kv_cache_usage": 0.5, "waiting": 4.0}),
                          replica("c", {"uptime_s": 30.0}))
    assert PLAYBOOK.remedies(starting, cond) == []  # its capacity is coming: nothing meanwhile


class _Queue:
    """A HistoryView with one series: the engine's `waiting` over the last minutes."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        self.points = points

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return list(self.points) if signal == "waiting" else []

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        return None


def test_a_saturated_pool_gets_the_replicas_its_demand_needs_at_most_doubling() -> None:
    p = POOL_DEFAULTS
    # 4 replicas each completing 5 req/s, their queues growing 2 req/s each (100 -> 340 waiting over 120 s)
    surge = []
    for n in ("a", "b", "c", "d"):
        v = replica(n, {"qps": 5.0, "waiting": 340.0, "kv_cache_usage": 0.4})
        v.history = _Queue([(880.0, 100.0)])
        surge.append(v)
    need = needed(surge, p)
    # demand 20 + 8 + 1360/300 = 32.5 req/s at 80% of 5: 9 replicas -> 5 more, capped at 4 (2x)
    assert need.add == 4 and "at most 4 more per decision" in need.why and "32.5 req/s" in need.why
    # without history the queue's growth is unknown: completions and backlog alone (24.5 / 4 -> 7: 3 more)
    for v in surge:
        v.history = _Queue([])
    assert needed(surge, p).add == 3
    # nobody saturated (short on spare queue only): WVA's step of one
    assert needed([replica(n, {"qps": 3.0, "waiting": 2.5}) for n in "ab"], p).add == 1
    # a big pool's need is its demand's, not the cap: one saturated replica completing 5 req/s, nine at 3
    calm = [replica(str(i), {"qps": 5.0 if i == 0 else 3.0, "waiting": 6.0 if i == 0 else 0.0}) for i in range(10)]
    assert needed(calm, p).add == 1  # 32 req/s at 0.8 x 5: 8 replicas would do; a scale-out adds at least one
    action, why = replica_scale_out(with_peers(surge[0], *surge[1:]), p)
    assert action is not None and action.target == "a" and action.params == {"add_replicas": 3} and why == ""


def test_every_replica_of_a_saturated_pool_proposes_the_same_one_action() -> None:
    views = [replica(n, {**SLOTS_FULL, "waiting": 300.0, "qps": 5.0}) for n in ("hot", "hot-2", "hot-3")]
    actions = set()
    for v in views:
        me = with_peers(v, *(o for o in views if o is not v))
        cond = PLAYBOOK.check(me)
        assert cond is not None
        first = PLAYBOOK.remedies(me, cond)[0]
        actions.add((first.kind, first.target, tuple(sorted(first.params.items()))))
    # one action for the pool: 15 req/s served + 900 waiting over 300 s at 80% of 5 -> 5 replicas, 2 more
    assert actions == {("scale_out", "hot", (("add_replicas", 2),))}, actions


def test_scale_in_only_the_newest_added_replica_and_only_when_settled() -> None:
    p = POOL_DEFAULTS
    light = {"kv_cache_usage": 0.1, "waiting": 0.0, "batch_utilization": 0.2}
    pool = [replica(n, light) for n in ("hot", "hot-2", "hot-r2", "hot-r3")]
    assert added(pool) == ["hot-r3", "hot-r2"] and anchor(pool) == "hot"
    verdict = shrink(pool, p)
    assert verdict.victim == "hot-r3" and verdict.kv == pytest.approx(0.4 / 3)
    assert verdict.batch == pytest.approx(0.8 / 3)
    # configured replicas only: nothing the doctor added, nothing to give back
    assert shrink([replica(n, light) for n in ("hot", "hot-2", "hot-3")], p).victim is None
    # the newest replica up under the scale-in cooldown (a scale-out just happened), or one starting
    young = [*pool[:3], replica("hot-r3", {**light, "uptime_s": 200.0})]
    assert shrink(young, p).victim is None and "still starting" in shrink(young, p).why
    longer = {**p, "pool_scale_in_cooldown_s": 900.0}
    settled = [*pool[:3], replica("hot-r3", {**light, "uptime_s": 600.0})]
    assert shrink(settled, p).victim == "hot-r3"
    assert shrink(settled, longer).victim is None and "scale-in cooldown (900 s)" in shrink(settled, longer).why
    busy = [*pool[:3], replica("hot-r3", light, change=True)]
    assert shrink(busy, p).victim is None
    # slots busier than the headroom allows on one fewer (0.7 x 4 / 3 = 0.93 > 0.8)
    assert shrink([replica(n, {**light, "batch_utilization": 0.7}) for n in ("hot", "hot-r2", "hot-r3", "hot-4")],
                  p).victim is None


def _scale_in_view(names: tuple[str, ...], values: Mapping[str, float], me: str = "hot") -> EngineView:
    views = [replica(n, values) for n in names]
    mine = next(v for v in views if v.name == me)
    out = with_peers(mine, *(v for v in views if v is not mine))
    out.params = dict(SCALE_IN.defaults)
    return out


def test_the_scale_in_playbook_fires_once_per_pool_on_its_anchor() -> None:
    light = {"kv_cache_usage": 0.1, "waiting": 0.0, "batch_utilization": 0.2}
    names = ("hot", "hot-2", "hot-r2")
    assert SCALE_IN.check(_scale_in_view(names, light, me="hot-2")) is None  # not the anchor
    view = _scale_in_view(names, light)
    cond = SCALE_IN.check(view)
    assert cond is not None and "fits on 2 of its 3 replicas: hot-r2 can be given back" in cond.summary
    [action] = SCALE_IN.remedies(view, cond)
    assert (action.kind, action.target, action.params, action.inverse) == ("scale_in", "hot",
                                                                         {"remove_replica": "hot-r2"},
                                                                         {"add_replicas": 1})
    assert SCALE_IN.check(_scale_in_view(names, {**light, "waiting": 2.0})) is None  # 6 waiting over 2: 3 > 2
    assert SCALE_IN.check(_scale_in_view(("hot",), light)) is None


def test_a_pool_is_judged_once_per_evaluation_however_many_replicas_propose(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 engines judged at once: every saturated replica's remedies ask for the pool's scale-out; the pool is
    judged once (view.memo, shared by build_views), and every replica gets the same answer as when judged alone."""
    from collectors.combine import EngineReading
    from doctor.pipeline import build_views, run_playbooks
    from playbooks import pool

    names = ["hot", *(f"hot-{i}" for i in range(2, 41))]
    signals = {n: Signals(engine=n, window_s=60.0, health="ok",  # type: ignore[arg-type]
                          values={**SLOTS_FULL, "uptime_s": 3600.0, "waiting": 300.0, "qps": 5.0}) for n in names}
    views = build_views([EngineReading(name=n, role="hot", url=f"http://{n}") for n in names], signals, now=1000.0)
    judged: list[int] = []
    real_judge = pool.judge
    monkeypatch.setattr(pool, "judge", lambda p, params: judged.append(len(p)) or real_judge(p, params))
    from playbooks.registry import all_playbooks

    held = {f"{pb.id}|{n}": {"onset": 0.0, "last": 999.0} for pb in all_playbooks() for n in names}  # past `for`
    findings = run_playbooks(views, held, now=1000.0)
    scale_outs = {(a.target, tuple(sorted(a.params.items()))) for f in findings for a in f.remedies
                  if a.kind == "scale_out"}
    alone = replica_scale_out(with_peers(views[5], *(v for v in views if v is not views[5])),
                              {**POOL_DEFAULTS, **PLAYBOOK.defaults})[0]
    assert alone is not None and scale_outs == {(alone.target, tuple(sorted(alone.params.items())))}
    assert len({f.engine for f in findings if any(a.kind == "scale_out" for a in f.remedies)}) == len(names)
    # once per playbook asking with its thresholds (three here), not once per replica (40 each)
    assert len(judged) <= 3 and set(judged) == {len(names)}, judged
