"""capacity_scale_out: QPS past one machine, or sequence slots full with KV headroom."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import EngineConfigView, Signals
from playbooks.base import EngineView
from playbooks.capacity_scale_out import PLAYBOOK
from playbooks.evaluate import evaluate
from playbooks.model import ACTION_KINDS, confidence_from

SLOTS_FULL = {"batch_utilization": 1.0, "waiting": 4.0, "kv_cache_usage": 0.5}


def view(values: Mapping[str, float | None], *, active: bool = False, **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=values,
                      reasons={"batch_utilization": "running / 64 (max_num_seqs 64)"})
    return EngineView(name="hot", role="hot", signals=signals, params=dict(PLAYBOOK.defaults), now=1000.0,
                      active=active, **kw)


def test_fires_above_100_qps() -> None:
    cond = PLAYBOOK.check(view({"qps": 120.0}))
    assert cond is not None
    ev = cond.evidence[0]
    assert (ev.signal, ev.value, ev.threshold, ev.comparison) == ("qps", 120.0, 100.0, ">")
    assert "120" in cond.summary


@pytest.mark.parametrize("qps", [50.0, 100.0])
def test_silent_at_or_below_100_qps(qps: float) -> None:
    assert PLAYBOOK.check(view({"qps": qps})) is None


def test_fires_when_slots_are_full_with_kv_headroom() -> None:
    cond = PLAYBOOK.check(view(SLOTS_FULL))
    assert cond is not None
    signals = [(e.signal, e.comparison, e.threshold) for e in cond.evidence]
    assert signals == [("batch_utilization", ">=", 0.98), ("waiting", ">", 0.0), ("kv_cache_usage", "<", 0.75)]
    assert "max_num_seqs 64" in cond.evidence[0].note


@pytest.mark.parametrize("change", [{"batch_utilization": 0.9}, {"waiting": 0.0}, {"kv_cache_usage": 0.8}])
def test_slots_need_all_three(change: dict[str, float]) -> None:
    assert PLAYBOOK.check(view({**SLOTS_FULL, **change})) is None


def test_hysteresis() -> None:
    edge = {**SLOTS_FULL, "batch_utilization": 0.95, "kv_cache_usage": 0.78}
    assert PLAYBOOK.check(view(edge)) is None
    assert PLAYBOOK.check(view(edge, active=True)) is not None
    assert PLAYBOOK.check(view({"qps": 95.0})) is None
    assert PLAYBOOK.check(view({"qps": 95.0}, active=True)) is not None


def test_none_never_fires() -> None:
    assert PLAYBOOK.check(view({})) is None
    for name in SLOTS_FULL:
        assert PLAYBOOK.check(view({**SLOTS_FULL, name: None})) is None
    assert PLAYBOOK.check(view({"qps": None, "batch_utilization": None})) is None


def test_confidence_grows_when_both_hold() -> None:
    one = PLAYBOOK.check(view({"qps": 150.0}))
    both = PLAYBOOK.check(view({"qps": 150.0, **SLOTS_FULL}))
    assert one is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(one.agreeing, one.considered)


def test_remedies_tensor_parallel_two_then_replica() -> None:
    v = view({"qps": 150.0})
    cond = PLAYBOOK.check(v)
    assert cond is not None
    actions = PLAYBOOK.remedies(v, cond)
    assert [(a.kind, dict(a.params)) for a in actions] == [("scale_out", {"tensor_parallel_size": 2}),
                                                           ("scale_out", {"add_replicas": 1})]
    assert all(a.kind in ACTION_KINDS and a.target == "hot" for a in actions)


def test_slot_saturation_also_offers_more_max_num_seqs() -> None:
    v = view(SLOTS_FULL, config=EngineConfigView(max_num_seqs=64))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    actions = PLAYBOOK.remedies(v, cond)
    assert actions[0].kind == "scale_out"
    assert actions[-1].kind == "relaunch" and actions[-1].params == {"max_num_seqs": 96}


def test_evaluate_for_duration() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"qps": 150.0})
    assert evaluate([v], state, now=0.0, playbooks=[PLAYBOOK]) == []
    assert evaluate([v], state, now=200.0, playbooks=[PLAYBOOK]) == []
    found = evaluate([v], state, now=300.0, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity, f.remedies[0].kind) for f in found] == [
        ("capacity_scale_out", "warning", "scale_out")]
