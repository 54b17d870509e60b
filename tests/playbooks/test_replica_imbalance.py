"""replica_imbalance: one engine far off the mean load of its same-role peers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.model import ACTION_KINDS, confidence_from
from playbooks.replica_imbalance import PLAYBOOK


def engine(name: str, values: Mapping[str, float | None], role: str | None = "hot", health: str = "ok") -> EngineView:
    signals = Signals(engine=name, window_s=60.0, health=health, values=values)  # type: ignore[arg-type]
    return EngineView(name=name, role=role, signals=signals, params={}, now=1000.0)


def fleet(*members: EngineView) -> list[EngineView]:
    for v in members:
        v.peers = [p for p in members if p is not v]
        v.params = dict(PLAYBOOK.defaults)
    return list(members)


def test_pair_10_vs_4_fires_on_both_with_the_same_first_remedy() -> None:
    a, b = fleet(engine("a", {"running": 10.0}), engine("b", {"running": 4.0}))
    over, under = PLAYBOOK.check(a), PLAYBOOK.check(b)
    assert over is not None and under is not None
    ev = over.evidence[0]
    assert (ev.signal, ev.value, ev.threshold, ev.comparison) == ("running", 10.0, 8.0, ">")
    assert "2.5x" in ev.note and "more" in over.summary
    assert under.evidence[0].comparison == "<" and "less" in under.summary
    # both findings propose the same action: cap the busy replica at the mean (7)
    first_a, first_b = PLAYBOOK.remedies(a, over)[0], PLAYBOOK.remedies(b, under)[0]
    assert first_a.id == first_b.id
    assert (first_a.kind, first_a.target, dict(first_a.params)) == ("set_max_in_flight", "router",
                                                                    {"engine": "a", "max_in_flight": 7})


def test_silent_within_2x() -> None:
    a, b = fleet(engine("a", {"running": 8.0, "qps": 5.0}), engine("b", {"running": 4.0, "qps": 3.0}))
    assert PLAYBOOK.check(a) is None and PLAYBOOK.check(b) is None


def test_qps_skew_counts_too() -> None:
    a, _b, _c = fleet(engine("a", {"qps": 30.0}), engine("b", {"qps": 10.0}), engine("c", {"qps": 10.0}))
    cond = PLAYBOOK.check(a)
    assert cond is not None and cond.evidence[0].signal == "qps"


def test_no_same_role_peers_no_finding() -> None:
    hot, cold = fleet(engine("hot", {"running": 40.0}), engine("cold", {"running": 1.0}, role="cold"))
    assert PLAYBOOK.check(hot) is None and PLAYBOOK.check(cold) is None
    x, _y = fleet(engine("x", {"running": 40.0}, role=None), engine("y", {"running": 1.0}, role=None))
    assert PLAYBOOK.check(x) is None
    (alone,) = fleet(engine("solo", {"running": 40.0}))
    assert PLAYBOOK.check(alone) is None


def test_needs_a_loaded_group() -> None:
    a, _b = fleet(engine("a", {"running": 3.0, "qps": 0.5}), engine("b", {"running": 0.0, "qps": 0.0}))
    assert PLAYBOOK.check(a) is None


def test_unhealthy_peers_are_not_compared() -> None:
    a, _b = fleet(engine("a", {"running": 10.0}), engine("b", {"running": 1.0}, health="unreachable"))
    assert PLAYBOOK.check(a) is None


def test_hysteresis() -> None:
    a, _b = fleet(engine("a", {"running": 7.5}), engine("b", {"running": 4.0}))  # 1.9x
    assert PLAYBOOK.check(a) is None
    a.active = True
    assert PLAYBOOK.check(a) is not None


@pytest.mark.parametrize("values", [{}, {"running": None, "qps": None}])
def test_none_never_fires(values: dict[str, float | None]) -> None:
    a, b = fleet(engine("a", values), engine("b", {"running": 10.0, "qps": 9.0}))
    assert PLAYBOOK.check(a) is None
    assert PLAYBOOK.check(b) is None


def test_kv_gap_and_waiting_skew_raise_confidence() -> None:
    a, _b = fleet(engine("a", {"running": 10.0}), engine("b", {"running": 4.0}))
    plain = PLAYBOOK.check(a)
    a2, _b2 = fleet(engine("a", {"running": 10.0, "kv_cache_usage": 0.9, "waiting": 5.0}),
                   engine("b", {"running": 4.0, "kv_cache_usage": 0.3, "waiting": 0.0}))
    strong = PLAYBOOK.check(a2)
    assert plain is not None and strong is not None
    assert {e.signal for e in strong.evidence} == {"running", "kv_cache_usage", "waiting"}
    assert confidence_from(strong.agreeing, strong.considered) > confidence_from(plain.agreeing, plain.considered)


def test_remedies_cap_then_drain() -> None:
    a, _b = fleet(engine("a", {"running": 10.0}), engine("b", {"running": 4.0}))
    cond = PLAYBOOK.check(a)
    assert cond is not None
    actions = PLAYBOOK.remedies(a, cond)
    assert [(x.kind, x.target) for x in actions] == [("set_max_in_flight", "router"), ("stop_routing", "router")]
    assert actions[1].params == {"engine": "a"}
    assert all(x.kind in ACTION_KINDS for x in actions)


def test_evaluate_for_duration() -> None:
    views = fleet(engine("a", {"running": 10.0}), engine("b", {"running": 4.0}))
    state: dict[str, dict[str, Any]] = {}
    assert evaluate(views, state, now=0.0, playbooks=[PLAYBOOK]) == []
    found = evaluate(views, state, now=PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert sorted((f.engine, f.severity) for f in found) == [("a", "warning"), ("b", "warning")]
