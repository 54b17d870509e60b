"""A role's replicas as one pool (WVA's spare-capacity rule), and the capacity decision's replica action."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.capacity_scale_out import PLAYBOOK
from playbooks.pool import POOL_DEFAULTS, fits_on_one_fewer, judge, pool_of

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


def _replica_actions(view: EngineView) -> list[str]:
    cond = PLAYBOOK.check(view)
    assert cond is not None
    return [a.description for a in PLAYBOOK.remedies(view, cond) if a.params.get("replicas") == 1]


def test_capacity_adds_a_replica_only_for_a_saturated_pool() -> None:
    me = replica("a", {**SLOTS_FULL, "waiting": 6.0})
    assert _replica_actions(me) == ["add a replica behind the router"]  # a pool of one: as before
    roomy = with_peers(me, replica("b", {"kv_cache_usage": 0.3, "waiting": 0.0}))
    assert _replica_actions(roomy) == []  # the peer has room: spread the load, do not add a replica
    saturated = with_peers(me, replica("b", {"kv_cache_usage": 0.5, "waiting": 4.0}))
    cond = PLAYBOOK.check(saturated)
    assert cond is not None
    first = PLAYBOOK.remedies(saturated, cond)[0]
    assert first.params == {"replicas": 1}
    assert first.description == ("add a replica: the hot pool is saturated (1 of 2 replicas saturated, spare KV "
                                 "0.30, spare queue 1.0 across the unsaturated)")
    starting = with_peers(me, replica("b", {"kv_cache_usage": 0.5, "waiting": 4.0}),
                          replica("c", {"uptime_s": 30.0}))
    assert _replica_actions(starting) == []
