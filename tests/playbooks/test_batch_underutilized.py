"""batch_underutilized: batches under 65% of the effective cap while work waits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import EngineConfigView, Signals
from playbooks.base import EngineView
from playbooks.batch_underutilized import PLAYBOOK
from playbooks.evaluate import evaluate
from playbooks.model import ACTION_KINDS, confidence_from


def view(values: Mapping[str, float | None], *, active: bool = False, **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=values,
                      reasons={"batch_utilization": "running / 64 (max_num_seqs 64)"})
    return EngineView(name="hot", role="hot", signals=signals, params=dict(PLAYBOOK.defaults), now=1000.0,
                      active=active, **kw)


def test_fires_below_65_percent_with_waiting() -> None:
    cond = PLAYBOOK.check(view({"batch_utilization": 0.4, "waiting": 3.0}))
    assert cond is not None
    ev = cond.evidence[0]
    assert (ev.signal, ev.value, ev.threshold, ev.comparison) == ("batch_utilization", 0.4, 0.65, "<")
    assert "max_num_seqs 64" in ev.note
    assert cond.evidence[1].signal == "waiting"
    assert PLAYBOOK.severity == "info"


@pytest.mark.parametrize(("batch", "waiting"), [(0.65, 3.0), (0.9, 3.0), (0.4, 0.0)])
def test_silent(batch: float, waiting: float) -> None:
    assert PLAYBOOK.check(view({"batch_utilization": batch, "waiting": waiting})) is None


def test_kv_bound_waiting_is_not_a_batching_chance() -> None:
    assert PLAYBOOK.check(view({"batch_utilization": 0.4, "waiting": 3.0, "kv_cache_usage": 0.9})) is None


def test_hysteresis() -> None:
    assert PLAYBOOK.check(view({"batch_utilization": 0.68, "waiting": 1.0})) is None
    assert PLAYBOOK.check(view({"batch_utilization": 0.68, "waiting": 1.0}, active=True)) is not None
    assert PLAYBOOK.check(view({"batch_utilization": 0.75, "waiting": 1.0}, active=True)) is None


@pytest.mark.parametrize("values", [{}, {"batch_utilization": None, "waiting": 5.0},
                                    {"batch_utilization": 0.1, "waiting": None}])
def test_none_never_fires(values: dict[str, float | None]) -> None:
    assert PLAYBOOK.check(view(values)) is None


def test_kv_headroom_raises_confidence() -> None:
    plain = PLAYBOOK.check(view({"batch_utilization": 0.4, "waiting": 3.0}))
    room = PLAYBOOK.check(view({"batch_utilization": 0.4, "waiting": 3.0, "kv_cache_usage": 0.3}))
    assert plain is not None and room is not None
    assert confidence_from(room.agreeing, room.considered) > confidence_from(plain.agreeing, plain.considered)


def test_remedies_batch_timeout_200_then_max_in_flight() -> None:
    v = view({"batch_utilization": 0.4, "waiting": 3.0, "running": 10.0},
             config=EngineConfigView(max_num_seqs=64, router_max_in_flight=10))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    actions = PLAYBOOK.remedies(v, cond)
    assert [(a.kind, a.target) for a in actions] == [("set_batch_timeout", "router"), ("set_max_in_flight", "router")]
    assert actions[0].params == {"engine": "hot", "batch_timeout_ms": 200}
    assert actions[1].params == {"engine": "hot", "max_in_flight": 13}
    assert all(a.kind in ACTION_KINDS for a in actions)


def test_evaluate_for_duration() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"batch_utilization": 0.4, "waiting": 3.0})
    assert evaluate([v], state, now=0.0, playbooks=[PLAYBOOK]) == []
    found = evaluate([v], state, now=PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in found] == [("batch_underutilized", "info")]
