"""prefix_cache_miss: low prefix hit rate where templates are configured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.model import ACTION_KINDS, confidence_from
from playbooks.prefix_cache_miss import PLAYBOOK


class History:
    def __init__(self, **baselines: float) -> None:
        self.baselines = baselines

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return []

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        return self.baselines.get(signal)


def view(values: Mapping[str, float | None], *, templates: bool = True, active: bool = False, **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=values)
    return EngineView(name="hot", role="hot", signals=signals, params=dict(PLAYBOOK.defaults), now=1000.0,
                      templates_configured=templates, active=active, **kw)


def test_fires_below_0_7_with_templates() -> None:
    cond = PLAYBOOK.check(view({"prefix_cache_hit_rate": 0.4}))
    assert cond is not None
    ev = cond.evidence[0]
    assert (ev.signal, ev.value, ev.threshold, ev.comparison) == ("prefix_cache_hit_rate", 0.4, 0.7, "<")
    assert "40%" in cond.summary


@pytest.mark.parametrize("hit", [0.7, 0.9])
def test_silent_at_or_above_threshold(hit: float) -> None:
    assert PLAYBOOK.check(view({"prefix_cache_hit_rate": hit})) is None


def test_without_templates_no_finding_at_any_rate() -> None:
    # a low rate without templates is the traffic's nature; p99_spike reads < 0.6 only as a root cause
    assert PLAYBOOK.check(view({"prefix_cache_hit_rate": 0.05}, templates=False)) is None


def test_hysteresis() -> None:
    assert PLAYBOOK.check(view({"prefix_cache_hit_rate": 0.72})) is None
    assert PLAYBOOK.check(view({"prefix_cache_hit_rate": 0.72}, active=True)) is not None
    assert PLAYBOOK.check(view({"prefix_cache_hit_rate": 0.8}, active=True)) is None


def test_none_never_fires() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"prefix_cache_hit_rate": None, "p99_ttft_s": 9.0},
                               history=History(p99_ttft_s=1.0))) is None


def test_ttft_rise_raises_confidence() -> None:
    alone = PLAYBOOK.check(view({"prefix_cache_hit_rate": 0.3, "p99_ttft_s": 1.0}, history=History(p99_ttft_s=0.9)))
    both = PLAYBOOK.check(view({"prefix_cache_hit_rate": 0.3, "p99_ttft_s": 2.0}, history=History(p99_ttft_s=0.5)))
    assert alone is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(alone.agreeing, alone.considered)
    assert both.evidence[1].signal == "p99_ttft_s" and both.evidence[1].threshold == 0.75


def test_remedy_rewarm() -> None:
    v = view({"prefix_cache_hit_rate": 0.3})
    cond = PLAYBOOK.check(v)
    assert cond is not None
    actions = PLAYBOOK.remedies(v, cond)
    assert [(a.kind, a.target, dict(a.params)) for a in actions] == [("rewarm_prefix_cache", "hot", {"variations": 20})]
    assert actions[0].kind in ACTION_KINDS


def test_evaluate_for_duration() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"prefix_cache_hit_rate": 0.3})
    assert evaluate([v], state, now=0.0, playbooks=[PLAYBOOK]) == []
    found = evaluate([v], state, now=PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in found] == [("prefix_cache_miss", "warning")]
