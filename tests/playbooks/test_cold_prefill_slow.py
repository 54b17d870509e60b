"""cold_prefill_slow: cold prefill > 0.16 ms/token or P99 prefill > 1.5 s for 5 minutes."""

from __future__ import annotations

from typing import Any

from collectors.types import EngineConfigView, Event, Signals
from playbooks.base import EngineView
from playbooks.cold_prefill_slow import PLAYBOOK
from playbooks.evaluate import evaluate
from playbooks.model import confidence_from


def view(values: dict[str, Any], *, active: bool = False, role: str = "cold", events: tuple[Event, ...] = (),
         config: EngineConfigView | None = None) -> EngineView:
    sig = Signals(engine="cold", window_s=60.0, health="ok", health_status=200, values=values, events=events)
    return EngineView(name="cold", role=role, signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0, active=active,
                      config=config or EngineConfigView(router_max_in_flight=8))


def test_slow_per_token_fires_with_cap_at_two_first() -> None:
    v = view({"prefill_s_per_token": 0.0002, "p99_prefill_s": 1.2})
    cond = PLAYBOOK.check(v)
    assert cond is not None and PLAYBOOK.severity == "warning"
    assert cond.summary == "cold prefill 0.20 ms per token"
    [e] = cond.evidence
    assert (e.signal, e.value, e.threshold) == ("prefill_s_per_token", 0.0002, 0.00016)
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["set_max_in_flight", "relaunch"]
    assert remedies[0].target == "router" and remedies[0].params == {"engine": "cold", "max_in_flight": 2}
    assert remedies[0].inverse == {"engine": "cold", "max_in_flight": 8}
    assert remedies[1].params == {"enable_chunked_prefill": True}


def test_seed_alert_p99_prefill_over_one_and_a_half_seconds() -> None:
    cond = PLAYBOOK.check(view({"prefill_s_per_token": 0.0001, "p99_prefill_s": 1.6}))
    assert cond is not None and "P99 prefill 1.60s" in cond.summary
    assert PLAYBOOK.check(view({"prefill_s_per_token": 0.00016, "p99_prefill_s": 1.5})) is None  # strict


def test_both_agreeing_raise_confidence() -> None:
    one = PLAYBOOK.check(view({"prefill_s_per_token": 0.0003, "p99_prefill_s": 1.0}))
    both = PLAYBOOK.check(view({"prefill_s_per_token": 0.0003, "p99_prefill_s": 3.0}))
    assert one is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(one.agreeing, one.considered)


def test_only_for_cold_engines() -> None:
    assert PLAYBOOK.roles == ("cold",)
    assert not PLAYBOOK.applies_to(view({}, role="hot"))
    assert PLAYBOOK.applies_to(view({}, role="cold"))


def test_chunked_prefill_already_on_is_not_proposed_again() -> None:
    line = Event("startup_config", "cold", 10.0, "Chunked prefill is enabled with max_num_batched_tokens=8192.",
                 {"max_num_batched_tokens": 8192})
    v = view({"prefill_s_per_token": 0.0003}, events=(line,), config=EngineConfigView(router_max_in_flight=2))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    assert [a.kind for a in PLAYBOOK.remedies(v, cond)] == ["escalate"]  # cap already 2, chunking already on


def test_hysteresis_keeps_an_active_finding_slightly_below() -> None:
    assert PLAYBOOK.check(view({"prefill_s_per_token": 0.000158})) is None
    assert PLAYBOOK.check(view({"prefill_s_per_token": 0.000158}, active=True)) is not None
    assert PLAYBOOK.check(view({"p99_prefill_s": 1.48}, active=True)) is not None
    # the band is narrow (2%): a healthy cold engine runs at 0.14 ms per token (up to 0.163 in one 60 s window)
    assert PLAYBOOK.check(view({"prefill_s_per_token": 0.00015}, active=True)) is None
    assert PLAYBOOK.check(view({"prefill_s_per_token": 0.0001}, active=True)) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"prefill_s_per_token": None, "p99_prefill_s": None})) is None
    v = view({"prefill_s_per_token": 0.001}, config=EngineConfigView())
    cond = PLAYBOOK.check(v)
    assert cond is not None
    assert PLAYBOOK.remedies(v, cond)[0].inverse == {"engine": "cold", "max_in_flight": None}


def test_evaluate_reports_only_after_five_minutes() -> None:
    state: dict[str, dict[str, Any]] = {}
    slow = view({"prefill_s_per_token": 0.0004})
    for t in (1000.0, 1100.0, 1200.0, 1299.0):
        assert evaluate([slow], state, now=t, playbooks=[PLAYBOOK]) == []
    findings = evaluate([slow], state, now=1300.0, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity, f.onset) for f in findings] == [("cold_prefill_slow", "warning", 1000.0)]
    assert findings[0].remedies[0].kind == "set_max_in_flight"
    # a hot engine with the same numbers is not judged by it
    hot = view({"prefill_s_per_token": 0.0004}, role="hot")
    assert evaluate([hot], {}, now=0.0, playbooks=[PLAYBOOK]) == []
