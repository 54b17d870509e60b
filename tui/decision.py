"""What approving, rejecting or rolling back an action will change, said exactly, for the confirmation dialog; and
which of those an action allows in its state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tui.model import ActionRow, FindingRow

VERBS = ("approve", "reject", "rollback")


def allowed(verb: str, action: ActionRow) -> str | None:
    """None when `verb` applies to the action now, else why not (a sentence)."""
    if verb in ("approve", "reject"):
        return None if action.status == "pending" else f"{action.id} is {action.status}, not pending"
    if verb == "rollback":
        if action.can_undo:
            return None
        if action.status not in ("applied", "verified"):
            return f"{action.id} is {action.status}; only an applied action can be rolled back"
        return f"{action.id} has no inverse: it cannot be undone"
    return f"unknown decision {verb!r}"


def _call(kind: str, target: str, params: Mapping[str, Any]) -> str:
    args = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{kind} on {target}({args})"


@dataclass(frozen=True)
class Frozen:
    """What the dialog shows, captured when it opened (later refreshes do not change it)."""

    verb: str
    action: ActionRow
    finding: FindingRow | None
    captured_at: float

    def title(self) -> str:
        return {"approve": "Approve and apply", "reject": "Reject", "rollback": "Roll back"}[self.verb] + \
            f" {self.action.id}?"

    def lines(self) -> list[str]:
        a = self.action
        when = datetime.fromtimestamp(self.captured_at, UTC).strftime("%H:%M:%S UTC")
        out = [f"As shown at {when}: {a.kind} on {a.target} for {a.engine or a.target} ({a.playbook}), "
               f"status {a.status}."]
        if self.finding is not None:
            out.append(f"Finding: {self.finding.summary}")
        if self.verb == "approve":
            out.append("This will apply now, within the daemon's guardrails:")
            out.append(f"  {_call(a.kind, a.target, a.params)}")
            if a.description:
                out.append(f"  ({a.description})")
            if a.verify:
                v = a.verify
                goal = (f"to {v.get('target')}" if v.get("target") is not None else f"by x{v.get('ratio')}")
                out.append(f"Then verify: {v.get('signal')} {v.get('direction')} {goal} within "
                           f"{v.get('within_s', '?')}s, else roll back.")
        elif self.verb == "reject":
            out.append("Nothing changes on the fleet: the action is marked refused, with your name, and is not "
                       "applied.")
        else:
            inv = a.inverse or {}
            params: Mapping[str, Any] = inv["params"] if isinstance(inv.get("params"), dict) else {}
            out.append("This will apply the inverse now:")
            out.append(f"  {_call(str(inv.get('action', '?')), str(inv.get('target', a.target)), params)}")
            out.append("The record becomes rolled_back (or failed, with why).")
        out.append("Recorded in the audit log under your name.")
        return [line for line in out if line]
