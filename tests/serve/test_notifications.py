"""What the daemon tells people: each new finding and each action's change once, not once per cycle."""

from __future__ import annotations

from typing import Any

from doctor.serve.notifications import CycleNotices


def _report(findings: list[dict[str, Any]], actions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"findings": findings, "actions": actions}


F = {"id": "f1", "engine": "hot", "playbook": "kv_pressure", "summary": "KV cache 97% full", "severity": "critical"}
INFO = {"id": "f2", "engine": "hot", "playbook": "batch_underutilized", "summary": "x", "severity": "info"}


def _action(status: str, reason: str = "") -> dict[str, Any]:
    return {"id": "a1", "action": "relaunch", "target": "hot", "engine": "hot", "status": status, "reason": reason,
            "finding": "f1"}


def test_each_finding_and_each_action_status_once() -> None:
    n = CycleNotices()
    first = n.events(_report([F, INFO], [_action("pending")]))
    assert [(e.kind, e.engine, e.playbook, e.severity) for e in first] == [
        ("finding", "hot", "kv_pressure", "critical"), ("approval", "hot", "kv_pressure", "warning")]
    assert first[1].action_id == "a1"
    assert n.events(_report([F, INFO], [_action("pending")])) == []  # the next cycle: nothing new
    later = n.events(_report([F], [_action("applied"), {**_action("verified"), "id": "a2"}]))
    assert [e.kind for e in later] == ["applied", "verified"]
    failed = n.events(_report([], [_action("failed", "did not improve: kept, escalated")]))
    assert [(e.kind, e.severity) for e in failed] == [("escalated", "critical")]
    assert [e.kind for e in n.events(_report([], [{**_action("refused"), "id": "a3"}]))] == []  # refusals: no page


def test_memory_is_bounded() -> None:
    n = CycleNotices()
    for i in range(5000):
        n.events(_report([{**F, "id": f"f{i}"}], []))
    assert len(n._said) <= 2000
