"""memory_fragmentation: framebuffer growth beyond the post-warm-up footprint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.memory_fragmentation import PLAYBOOK
from playbooks.model import ACTION_KINDS, confidence_from


def view(values: Mapping[str, float | None], *, active: bool = False, **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=values)
    return EngineView(name="hot", role="hot", signals=signals, params=dict(PLAYBOOK.defaults), now=1000.0,
                      active=active, **kw)


def test_fires_above_threshold_with_evidence() -> None:
    cond = PLAYBOOK.check(view({"memory_growth_ratio": 0.2}))
    assert cond is not None
    ev = cond.evidence[0]
    assert (ev.signal, ev.value, ev.threshold, ev.comparison) == ("memory_growth_ratio", 0.2, 0.15, ">")
    assert ev.window_s == 60.0
    assert "20%" in cond.summary


@pytest.mark.parametrize("growth", [0.0, 0.1, 0.15])
def test_silent_at_or_below_threshold(growth: float) -> None:
    assert PLAYBOOK.check(view({"memory_growth_ratio": growth})) is None


def test_hysteresis_keeps_an_active_finding() -> None:
    assert PLAYBOOK.check(view({"memory_growth_ratio": 0.14})) is None
    assert PLAYBOOK.check(view({"memory_growth_ratio": 0.14}, active=True)) is not None
    assert PLAYBOOK.check(view({"memory_growth_ratio": 0.13}, active=True)) is None


def test_none_never_fires() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"memory_growth_ratio": None, "fb_used_ratio": 0.99})) is None
    assert PLAYBOOK.check(view({"memory_growth_ratio": 0.3, "fb_used_ratio": None})) is not None


def test_confidence_grows_with_a_full_framebuffer() -> None:
    alone = PLAYBOOK.check(view({"memory_growth_ratio": 0.3, "fb_used_ratio": 0.5}))
    both = PLAYBOOK.check(view({"memory_growth_ratio": 0.3, "fb_used_ratio": 0.97}))
    assert alone is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(alone.agreeing, alone.considered)
    assert [e.signal for e in both.evidence] == ["memory_growth_ratio", "fb_used_ratio"]


def test_silent_while_the_doctor_acts_on_it() -> None:
    assert PLAYBOOK.check(view({"memory_growth_ratio": 0.5}, change_in_progress=True)) is None


def test_remedies_defragment_then_relaunch() -> None:
    v = view({"memory_growth_ratio": 0.3})
    cond = PLAYBOOK.check(v)
    assert cond is not None
    actions = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in actions] == ["defragment", "relaunch"]
    assert actions[0].target == "hot" and actions[0].params["fallback"] == "relaunch"
    assert all(a.kind in ACTION_KINDS for a in actions)


def test_evaluate_waits_for_the_for_duration() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"memory_growth_ratio": 0.3, "fb_used_ratio": 0.97})
    assert evaluate([v], state, now=0.0, playbooks=[PLAYBOOK]) == []
    assert evaluate([v], state, now=PLAYBOOK.for_s - 1, playbooks=[PLAYBOOK]) == []
    found = evaluate([v], state, now=PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert len(found) == 1
    f = found[0]
    assert (f.playbook, f.severity, f.engine, f.onset) == ("memory_fragmentation", "warning", "hot", 0.0)
    assert f.remedies[0].kind == "defragment"
    # hovering just under the threshold keeps the same incident (hysteresis through evaluate)
    again = evaluate([view({"memory_growth_ratio": 0.14})], state, now=PLAYBOOK.for_s + 60, playbooks=[PLAYBOOK])
    assert [x.id for x in again] == [f.id]
