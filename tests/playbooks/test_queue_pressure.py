"""queue_pressure: waiting > 5 or P95 queue time >= 1 s is a warning; the remedy follows the binding limit."""

from __future__ import annotations

from typing import Any

from collectors.types import EngineConfigView, Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.model import confidence_from
from playbooks.queue_pressure import PLAYBOOK


def view(values: dict[str, Any], *, active: bool = False, config: EngineConfigView | None = None) -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values=values)
    return EngineView(name="hot", role="hot", signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0, active=active,
                      config=config or EngineConfigView(max_num_seqs=64))


def test_waiting_over_five_is_a_warning_with_scale_out_first() -> None:
    v = view({"waiting": 9.0, "running": 64.0, "batch_utilization": 1.0, "kv_cache_usage": 0.7})
    cond = PLAYBOOK.check(v)
    assert cond is not None and cond.severity is None and PLAYBOOK.severity == "warning"
    assert cond.summary == "9 requests waiting"
    assert [(e.signal, e.value, e.threshold, e.comparison) for e in cond.evidence] == [("waiting", 9.0, 5.0, ">")]
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["scale_out", "length_limit"]
    assert remedies[1].target == "router" and remedies[1].params == {"max_tokens": 8192, "expires_in_s": 3600}


def test_thresholds() -> None:
    assert PLAYBOOK.check(view({"waiting": 5.0, "p95_queue_s": 0.99})) is None
    assert PLAYBOOK.check(view({"waiting": 6.0})) is not None
    cond = PLAYBOOK.check(view({"waiting": 0.0, "p95_queue_s": 1.0}))  # >= 1 s
    assert cond is not None and cond.evidence[0].comparison == ">=" and "P95 queue time 1s" in cond.summary


def test_confidence_grows_with_agreeing_signals() -> None:
    one = PLAYBOOK.check(view({"waiting": 9.0, "p95_queue_s": 0.2}))
    both = PLAYBOOK.check(view({"waiting": 9.0, "p95_queue_s": 2.0}))
    assert one is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(one.agreeing, one.considered)


def test_router_cap_binding_puts_raise_max_in_flight_first() -> None:
    cfg = EngineConfigView(max_num_seqs=256, router_max_in_flight=32)
    v = view({"waiting": 0.0, "running": 32.0, "batch_utilization": 0.125, "kv_cache_usage": 0.2,
              "router_queue_p99_s": 2.5}, config=cfg)
    cond = PLAYBOOK.check(v)
    assert cond is not None and "router P99 queue time 2.5s" in cond.summary
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["set_max_in_flight", "scale_out", "length_limit"]
    assert remedies[0].target == "router" and remedies[0].params == {"engine": "hot", "max_in_flight": 49}
    assert remedies[0].inverse == {"engine": "hot", "max_in_flight": 32}


def test_full_engine_does_not_get_a_higher_cap() -> None:
    cfg = EngineConfigView(max_num_seqs=32, router_max_in_flight=32)
    v = view({"waiting": 20.0, "running": 32.0, "batch_utilization": 1.0, "kv_cache_usage": 0.5}, config=cfg)
    cond = PLAYBOOK.check(v)
    assert cond is not None and PLAYBOOK.remedies(v, cond)[0].kind == "scale_out"


def test_hysteresis_keeps_an_active_finding_slightly_below() -> None:
    assert PLAYBOOK.check(view({"p95_queue_s": 0.95})) is None
    assert PLAYBOOK.check(view({"p95_queue_s": 0.95}, active=True)) is not None
    assert PLAYBOOK.check(view({"waiting": 5.0}, active=True)) is not None  # 5 > 5 x 0.9
    assert PLAYBOOK.check(view({"waiting": 4.0, "p95_queue_s": 0.5}, active=True)) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"waiting": None, "p95_queue_s": None, "router_queue_p99_s": None})) is None
    cond = PLAYBOOK.check(view({"waiting": 8.0, "running": None, "batch_utilization": None}))
    assert cond is not None and PLAYBOOK.remedies(view({}), cond)[0].kind == "scale_out"


def test_evaluate_reports_only_after_for_s() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"waiting": 12.0})
    assert evaluate([v], state, now=1000.0, playbooks=[PLAYBOOK]) == []  # a burst
    assert evaluate([view({"waiting": 0.0})], state, now=1030.0, playbooks=[PLAYBOOK]) == []  # gone: reset
    assert evaluate([v], state, now=1040.0, playbooks=[PLAYBOOK]) == []
    findings = evaluate([v], state, now=1040.0 + PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity, f.onset) for f in findings] == [("queue_pressure", "warning", 1040.0)]
