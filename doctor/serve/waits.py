"""An alert is a trigger, not a verdict: each firing alert waits until a cycle of the doctor's own reading judges it.

Confirmed: the cycle found the alert's playbook on its engine (what the cycle did about it, within the mode and
the guardrails, is named by the finding's actions). Pending: the condition holds but has not lasted the
playbook's `for` yet; the alert keeps waiting, up to `[serve] alert_wait_s`. Otherwise: not confirmed, and
nothing acts on the alert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from doctor.cycle import CycleResult
from doctor.serve.inbox import Entry
from doctor.serve.mapping import Target


@dataclass
class Waiting:
    """A firing alert waiting for the doctor's reading."""

    entry: Entry
    target: Target
    deadline: float
    told_pending: bool = False

    @property
    def engine(self) -> str:
        return str(self.target.engine)

    @property
    def fingerprint(self) -> str:
        return self.entry.alert.fingerprint


@dataclass(frozen=True)
class Verdict:
    """`outcome` confirmed | not_confirmed | waiting; `event` the audit event to write now (None: none)."""

    outcome: str
    event: str | None
    fields: dict[str, Any] = field(default_factory=dict)


def judge(w: Waiting, result: CycleResult, now: float) -> Verdict:
    """What this cycle says about the alert."""
    playbook, engine = w.target.playbook, w.target.engine
    found = next((f for f in result.findings if f.playbook == playbook and f.engine == engine), None)
    if found is not None:
        actions = [{k: a.get(k) for k in ("id", "action", "target", "status", "reason")}
                   for a in result.report.get("actions", []) if a.get("finding") == found.id]
        return Verdict("confirmed", "alert_confirmed", {
            "finding": found.id, "severity": found.severity, "summary": found.summary, "actions": actions,
            "reason": _acted(actions)})
    pending = next((f for f in result.pending if f.playbook == playbook and f.engine == engine), None)
    if pending is not None and now < w.deadline:
        if w.told_pending:
            return Verdict("waiting", None)
        w.told_pending = True
        return Verdict("waiting", "alert_pending", {
            "finding": pending.id, "summary": pending.summary,
            "reason": f"the doctor sees it too, held {pending.held_s:.0f} s of its {pending.for_s:g} s `for`: waiting "
                      f"(up to {max(0.0, w.deadline - now):.0f} s more)"})
    if pending is not None:
        why = (f"the condition held {pending.held_s:.0f} s of the playbook's {pending.for_s:g} s `for` when the "
               "wait ended")
    else:
        engines: list[dict[str, Any]] = result.report.get("engines", [])
        engine_report = next((e for e in engines if e.get("name") == engine), {})
        why = f"the doctor's reading does not show {playbook} on {engine}"
        if engine_report and not engine_report.get("reachable"):
            why += " (the engine could not be read)"
    return Verdict("not_confirmed", "alert_not_confirmed", {"reason": why + "; nothing acts on this alert"})


def _acted(actions: list[dict[str, Any]]) -> str:
    if not actions:
        return "confirmed; no action this cycle (observe mode, info only, or nothing to do)"
    return "confirmed; " + "; ".join(f"{a['action']} on {a['target']}: {a['status']}"
                                     + (f" ({a['reason']})" if a.get("reason") else "") for a in actions)
