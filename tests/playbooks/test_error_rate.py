"""error_rate: error share > 5% or abort share > 10% is critical and escalated with the numbers."""

from __future__ import annotations

from typing import Any

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.error_rate import PLAYBOOK
from playbooks.evaluate import evaluate
from playbooks.model import confidence_from


def view(values: dict[str, Any], *, active: bool = False) -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values=values,
                  reasons={"error_rate": "5xx share of generation requests"})
    return EngineView(name="hot", role="hot", signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0, active=active)


def test_error_share_over_five_percent_is_critical() -> None:
    v = view({"error_rate": 0.08, "abort_rate": 0.0, "qps": 20.0})
    cond = PLAYBOOK.check(v)
    assert cond is not None and PLAYBOOK.severity == "critical" and cond.severity is None
    assert cond.summary == "8% of requests failed"
    e = cond.evidence[0]
    assert (e.signal, e.value, e.threshold, e.window_s) == ("error_rate", 0.08, 0.05, 60.0)
    assert e.note == "5xx share of generation requests"
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["escalate"]
    assert remedies[0].params["error_rate"] == 0.08 and remedies[0].params["qps"] == 20.0


def test_thresholds_are_strict() -> None:
    assert PLAYBOOK.check(view({"error_rate": 0.05, "abort_rate": 0.10, "qps": 20.0})) is None
    assert PLAYBOOK.check(view({"error_rate": 0.051, "qps": 20.0})) is not None
    assert PLAYBOOK.check(view({"abort_rate": 0.101, "qps": 20.0})) is not None


def test_abort_share_over_ten_percent() -> None:
    cond = PLAYBOOK.check(view({"error_rate": 0.0, "abort_rate": 0.25, "qps": 20.0}))
    assert cond is not None and "25% of requests aborted" in cond.summary
    assert "length is a normal finish" in cond.evidence[0].note


def test_both_agreeing_raise_confidence() -> None:
    one = PLAYBOOK.check(view({"error_rate": 0.2, "abort_rate": 0.0, "qps": 20.0}))
    both = PLAYBOOK.check(view({"error_rate": 0.2, "abort_rate": 0.3, "qps": 20.0}))
    assert one is not None and both is not None and len(both.evidence) == 2
    assert confidence_from(both.agreeing, both.considered) > confidence_from(one.agreeing, one.considered)


def test_abort_share_of_a_handful_of_requests_is_noise() -> None:
    # 0.1 req/s over 60 s: 6 finished requests < min_requests (10)
    assert PLAYBOOK.check(view({"abort_rate": 0.5, "qps": 0.1})) is None
    # errors still count: a server failing every request may finish none
    assert PLAYBOOK.check(view({"error_rate": 1.0, "qps": 0.0})) is not None


def test_hysteresis_keeps_an_active_finding_slightly_below() -> None:
    assert PLAYBOOK.check(view({"error_rate": 0.048, "qps": 20.0})) is None
    assert PLAYBOOK.check(view({"error_rate": 0.048, "qps": 20.0}, active=True)) is not None
    assert PLAYBOOK.check(view({"error_rate": 0.04, "qps": 20.0}, active=True)) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"error_rate": None, "abort_rate": None, "qps": None})) is None
    cond = PLAYBOOK.check(view({"abort_rate": 0.5, "qps": None}))  # volume unknown: judged on the share
    assert cond is not None and "qps" not in PLAYBOOK.remedies(view({"abort_rate": 0.5}), cond)[0].params


def test_evaluate_reports_only_after_for_s() -> None:
    state: dict[str, dict[str, Any]] = {}
    bad = view({"error_rate": 0.3, "qps": 20.0})
    assert evaluate([bad], state, now=1000.0, playbooks=[PLAYBOOK]) == []
    findings = evaluate([bad], state, now=1000.0 + PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in findings] == [("error_rate", "critical")]
    assert findings[0].remedies[0].kind == "escalate"
