"""long_prompt_share: > 20% of the hot engine's prompts at or above the route threshold, or > 5% misrouted."""

from __future__ import annotations

from typing import Any

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.long_prompt_share import PLAYBOOK
from playbooks.model import confidence_from


def view(values: dict[str, Any], *, active: bool = False, role: str = "hot") -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values=values)
    return EngineView(name="hot", role=role, signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0, active=active)


def test_long_share_fires_with_a_lower_route_threshold_first() -> None:
    v = view({"long_prompt_share": 0.3})
    cond = PLAYBOOK.check(v)
    assert cond is not None and PLAYBOOK.severity == "warning"
    assert cond.summary == "30% of hot prompts >= 5120 tokens"
    [e] = cond.evidence
    assert (e.signal, e.value, e.threshold) == ("long_prompt_share", 0.3, 0.2) and "5120" in e.note
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["set_route_threshold", "length_limit"]
    assert remedies[0].target == "router" and remedies[0].params == {"threshold_tokens": 4096}
    assert remedies[0].inverse == {"threshold_tokens": 5120}
    assert remedies[1].params == {"max_tokens": 8192, "expires_in_s": 3600}


def test_thresholds_are_strict() -> None:
    assert PLAYBOOK.check(view({"long_prompt_share": 0.2, "misrouted_share": 0.05})) is None
    assert PLAYBOOK.check(view({"long_prompt_share": 0.21})) is not None


def test_router_misroute_share_alone_fires() -> None:
    cond = PLAYBOOK.check(view({"long_prompt_share": 0.1, "misrouted_share": 0.08}))
    assert cond is not None and cond.summary == "8% of requests misrouted"
    assert cond.evidence[0].threshold == 0.05


def test_both_agreeing_raise_confidence() -> None:
    one = PLAYBOOK.check(view({"long_prompt_share": 0.4, "misrouted_share": 0.01}))
    both = PLAYBOOK.check(view({"long_prompt_share": 0.4, "misrouted_share": 0.1}))
    assert one is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(one.agreeing, one.considered)


def test_router_threshold_when_reported_is_used() -> None:
    v = view({"long_prompt_share": 0.5, "route_threshold_tokens": 8192.0})
    cond = PLAYBOOK.check(v)
    assert cond is not None and ">= 8192 tokens" in cond.summary
    assert PLAYBOOK.remedies(v, cond)[0].params == {"threshold_tokens": 6144}


def test_only_for_hot_engines() -> None:
    assert not PLAYBOOK.applies_to(view({}, role="cold"))
    assert PLAYBOOK.applies_to(view({}, role="hot"))


def test_hysteresis_keeps_an_active_finding_slightly_below() -> None:
    assert PLAYBOOK.check(view({"long_prompt_share": 0.19})) is None
    assert PLAYBOOK.check(view({"long_prompt_share": 0.19}, active=True)) is not None
    assert PLAYBOOK.check(view({"long_prompt_share": 0.15}, active=True)) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None  # misrouted_share absent: only the first condition
    assert PLAYBOOK.check(view({"long_prompt_share": None, "misrouted_share": None})) is None


def test_evaluate_reports_only_after_for_s() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"long_prompt_share": 0.35})
    assert evaluate([v], state, now=1000.0, playbooks=[PLAYBOOK]) == []
    findings = evaluate([v], state, now=1000.0 + PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in findings] == [("long_prompt_share", "warning")]
    assert findings[0].remedies[0].kind == "set_route_threshold"


def test_the_hot_cold_boundary_is_one_setting() -> None:
    """A deployment with a 1024-token boundary (`long_prompt_tokens`) was told "47% of hot prompts >= 5120
    tokens": the share was computed at the config's boundary and the text at the playbook's own default."""
    from dataclasses import replace as dc_replace

    from doctor.config import DoctorConfig
    from doctor.diagnose import parse_options
    from doctor.pipeline import run_playbooks

    config = DoctorConfig(long_prompt_tokens=1024)
    state: dict[str, dict[str, Any]] = {}
    for now in (1000.0, 1030.0, 1000.0 + PLAYBOOK.for_s + 1):  # held past its `for`
        findings = run_playbooks([dc_replace(view({"long_prompt_share": 0.47}), now=now)], state, now=now,
                                 settings=config)
    [f] = [f for f in findings if f.playbook == PLAYBOOK.id]
    assert f.summary == "47% of hot prompts >= 1024 tokens", f.summary
    assert "1024" in f.evidence[0].note and "5120" not in f.evidence[0].note
    # the flag sets the same one setting, with or without a config file
    opts = parse_options(["--engine", "hot=http://127.0.0.1:1", "--long-prompt-tokens", "1024"])
    assert opts.long_prompt_tokens == 1024 and opts.settings.long_prompt_tokens == 1024
