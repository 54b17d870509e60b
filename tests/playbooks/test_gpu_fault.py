"""gpu_fault: fatal Xids and double-bit ECC errors are critical; other Xids a warning to escalate."""

from __future__ import annotations

from typing import Any

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.gpu_fault import FATAL_XIDS, PLAYBOOK
from playbooks.model import confidence_from


def view(values: dict[str, Any], *, active: bool = False, reasons: dict[str, str] | None = None) -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values=values, reasons=reasons or {})
    return EngineView(name="hot", role="hot", signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0, active=active)


def test_fatal_class_is_the_documented_set() -> None:
    assert frozenset({48, 63, 64, 74, 79, 92, 94, 95}) == FATAL_XIDS


def test_fatal_xid_is_critical_with_stop_routing_first() -> None:
    v = view({"xid_errors": 1.0, "xid_last_code": 79.0, "ecc_dbe_errors": 0.0},
             reasons={"xid_last_code": "Xid 79: GPU has fallen off the bus"})
    cond = PLAYBOOK.check(v)
    assert cond is not None and cond.severity == "critical"
    assert "fatal Xid 79" in cond.summary
    by_signal = {e.signal: e for e in cond.evidence}
    assert by_signal["xid_errors"].value == 1.0 and by_signal["xid_errors"].threshold == 0.0
    assert by_signal["xid_last_code"].value == 79.0 and by_signal["xid_last_code"].comparison == "in"
    assert "fallen off the bus" in by_signal["xid_last_code"].note
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["stop_routing", "escalate"]
    assert remedies[0].target == "router" and remedies[0].params == {"engine": "hot"}
    assert remedies[0].inverse == {"engine": "hot", "state": "active"}


def test_ecc_double_bit_is_critical() -> None:
    cond = PLAYBOOK.check(view({"xid_errors": 0.0, "xid_last_code": 0.0, "ecc_dbe_errors": 2.0}))
    assert cond is not None and cond.severity == "critical"
    assert [(e.signal, e.value, e.threshold) for e in cond.evidence] == [("ecc_dbe_errors", 2.0, 0.0)]
    assert PLAYBOOK.remedies(view({}), cond)[0].kind == "stop_routing"


def test_confidence_grows_when_xid_and_ecc_agree() -> None:
    one = PLAYBOOK.check(view({"ecc_dbe_errors": 1.0}))
    both = PLAYBOOK.check(view({"xid_errors": 1.0, "xid_last_code": 48.0, "ecc_dbe_errors": 1.0}))
    assert one is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(one.agreeing, one.considered)


def test_non_fatal_xid_is_a_warning_to_escalate_only() -> None:
    v = view({"xid_errors": 3.0, "xid_last_code": 13.0, "ecc_dbe_errors": 0.0})
    cond = PLAYBOOK.check(v)
    assert cond is not None and cond.severity == "warning"
    assert any(e.signal == "xid_last_code" and e.comparison == "not in" for e in cond.evidence)
    assert [a.kind for a in PLAYBOOK.remedies(v, cond)] == ["escalate"]


def test_xid_count_without_a_code_is_a_warning() -> None:
    cond = PLAYBOOK.check(view({"xid_errors": 1.0}))
    assert cond is not None and cond.severity == "warning" and "code unknown" in cond.summary


def test_silent_without_new_xids_or_ecc_errors() -> None:
    assert PLAYBOOK.check(view({"xid_errors": 0.0, "xid_last_code": 0.0, "ecc_dbe_errors": 0.0})) is None
    # an old fatal code (a dcgm last-Xid gauge already set at the first read) does not start a finding
    assert PLAYBOOK.check(view({"xid_errors": 0.0, "xid_last_code": 79.0})) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"xid_errors": None, "xid_last_code": None, "ecc_dbe_errors": None})) is None


def test_hysteresis_keeps_a_fatal_code_firing_after_the_window_with_the_xid() -> None:
    quiet = {"xid_errors": 0.0, "xid_last_code": 94.0, "ecc_dbe_errors": 0.0}
    assert PLAYBOOK.check(view(quiet)) is None
    cond = PLAYBOOK.check(view(quiet, active=True))
    assert cond is not None and cond.severity == "critical"
    # a non-fatal last code does not hold it
    assert PLAYBOOK.check(view({**quiet, "xid_last_code": 13.0}, active=True)) is None


def test_evaluate_reports_at_once() -> None:
    state: dict[str, dict[str, Any]] = {}
    findings = evaluate([view({"xid_errors": 1.0, "xid_last_code": 79.0})], state, now=1000.0, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in findings] == [("gpu_fault", "critical")]
    assert findings[0].remedies[0].kind == "stop_routing"
    # the next window has no new Xid, but the GPU is still broken: the finding (and its id) holds
    again = evaluate([view({"xid_errors": 0.0, "xid_last_code": 79.0})], state, now=1060.0, playbooks=[PLAYBOOK])
    assert [f.id for f in again] == [findings[0].id]
