"""engine_stalled: /health 200, no tokens and no finished requests while work waits or runs."""

from __future__ import annotations

from typing import Any

from collectors.types import Event, HealthState, Signals
from playbooks.base import EngineView
from playbooks.engine_stalled import PLAYBOOK
from playbooks.evaluate import evaluate
from playbooks.model import confidence_from

STALLED = {"generation_tokens_per_s": 0.0, "qps": 0.0, "waiting": 7.0, "running": 12.0, "generation_idle_s": 60.0}


def view(values: dict[str, Any], *, active: bool = False, health: HealthState = "ok", events: tuple[Event, ...] = (),
         change: bool = False) -> EngineView:
    sig = Signals(engine="cold", window_s=30.0, health=health, health_status=200 if health == "ok" else 503,
                  values=values, events=events)
    return EngineView(name="cold", role="cold", signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0,
                      active=active, change_in_progress=change)


def test_fires_when_work_waits_and_nothing_comes_out() -> None:
    v = view(STALLED)
    cond = PLAYBOOK.check(v)
    assert cond is not None and PLAYBOOK.severity == "critical"
    assert "12 running and 7 waiting" in cond.summary and "no token progress for 60s" in cond.summary
    by_signal = {e.signal: e for e in cond.evidence}
    assert by_signal["generation_tokens_per_s"].value == 0.0 and by_signal["generation_tokens_per_s"].comparison == "<="
    assert by_signal["waiting"].value == 7.0 and by_signal["waiting"].threshold == 0.0
    assert by_signal["health_status"].value == 200.0
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["relaunch", "escalate"] and remedies[0].target == "cold"


def test_running_alone_or_waiting_alone_is_enough() -> None:
    assert PLAYBOOK.check(view({**STALLED, "waiting": 0.0})) is not None
    assert PLAYBOOK.check(view({**STALLED, "running": 0.0})) is not None


def test_under_a_minute_of_silence_can_be_a_long_prefill() -> None:
    assert PLAYBOOK.check(view({**STALLED, "generation_idle_s": 45.0})) is None
    assert PLAYBOOK.check(view({**STALLED, "generation_idle_s": None})) is None  # not measured: no verdict


def test_idle_engine_is_not_stalled() -> None:
    assert PLAYBOOK.check(view({**STALLED, "waiting": 0.0, "running": 0.0})) is None
    assert PLAYBOOK.check(view({**STALLED, "waiting": 0.0, "running": 0.0}, active=True)) is None


def test_any_progress_clears_it() -> None:
    assert PLAYBOOK.check(view({**STALLED, "generation_tokens_per_s": 0.5})) is None
    assert PLAYBOOK.check(view({**STALLED, "qps": 0.1})) is None
    # hysteresis has nothing to relax at zero: one token of progress clears an active finding too
    assert PLAYBOOK.check(view({**STALLED, "generation_tokens_per_s": 0.5}, active=True)) is None
    assert PLAYBOOK.check(view(STALLED, active=True)) is not None


def test_not_while_the_doctor_changes_it_nor_when_health_fails() -> None:
    assert PLAYBOOK.check(view(STALLED, change=True)) is None
    assert PLAYBOOK.check(view(STALLED, health="unhealthy")) is None  # engine_down's case
    assert PLAYBOOK.check(view(STALLED, health="unreachable")) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({**STALLED, "generation_tokens_per_s": None})) is None
    assert PLAYBOOK.check(view({**STALLED, "qps": None})) is None
    assert PLAYBOOK.check(view({**STALLED, "waiting": None, "running": None})) is None


def test_a_timeout_line_raises_confidence() -> None:
    line = Event("model_timeout", "cold", 995.0, "TimeoutError: RPC call to execute_model timed out.",
                 {"rpc": "execute_model"})
    plain = PLAYBOOK.check(view(STALLED))
    logged = PLAYBOOK.check(view(STALLED, events=(line,)))
    assert plain is not None and logged is not None
    assert any(e.signal == "log" and "execute_model" in str(e.value) for e in logged.evidence)
    assert confidence_from(logged.agreeing, logged.considered) > confidence_from(plain.agreeing, plain.considered)


def test_evaluate_reports_only_after_for_s() -> None:
    state: dict[str, dict[str, Any]] = {}
    pending: list[Any] = []
    # a minute without tokens, maybe a very long prefill: pending, with how long it still needs
    assert evaluate([view(STALLED)], state, now=1000.0, playbooks=[PLAYBOOK], pending=pending) == []
    assert [(p.status, p.fires_in_s) for p in pending] == [("pending", 30.0)]
    assert evaluate([view(STALLED)], state, now=1015.0, playbooks=[PLAYBOOK]) == []
    findings = evaluate([view(STALLED)], state, now=1000.0 + PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity, f.onset) for f in findings] == [("engine_stalled", "critical", 1000.0)]
    # progress resets the clock
    assert evaluate([view({**STALLED, "generation_tokens_per_s": 50.0})], state, now=1070.0, playbooks=[PLAYBOOK]) == []
    assert evaluate([view(STALLED)], state, now=1080.0, playbooks=[PLAYBOOK]) == []
