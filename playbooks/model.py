"""What the playbooks produce: Findings with Evidence and the Actions they propose.

Plain frozen dataclasses; they render themselves the same way for text, JSON and the TUI. An Action
only describes a remedy (kind, target, parameters, its inverse, its risk); applying it belongs to
the remediation room.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from playbooks.action_kinds import ACTION_KINDS, Risk

__all__ = ["ACTION_KINDS", "SEVERITY_RANK", "Action", "Evidence", "Finding", "Risk", "Severity", "confidence_from",
           "fingerprint"]

Severity = Literal["info", "warning", "critical"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}

def _num(value: Any) -> Any:
    """JSON-safe numbers: NaN/inf become None, floats are rounded for reading."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return round(value, 6)
    return value


@dataclass(frozen=True)
class Evidence:
    """One number that supports a finding: the signal, its value, the threshold it crossed, the window."""

    signal: str
    value: float | str | None
    threshold: float | str | None
    window_s: float
    comparison: str = ">"  # how value relates to threshold: ">", "<", ">=", "==", "present"
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"signal": self.signal, "value": _num(self.value), "threshold": _num(self.threshold),
               "window_s": _num(self.window_s), "comparison": self.comparison}
        if self.note:
            out["note"] = self.note
        return out

    def text(self) -> str:
        def fmt(v: float | str | None) -> str:
            if isinstance(v, float):
                return f"{v:.4g}"
            return "n/a" if v is None else str(v)

        base = f"{self.signal} = {fmt(self.value)} ({self.comparison} {fmt(self.threshold)}"
        base += f" over {self.window_s:g}s)" if self.window_s else ")"
        return base + (f" - {self.note}" if self.note else "")


@dataclass(frozen=True)
class Action:
    """A proposed remedy. `inverse` is the action that undoes it (None when it cannot be undone)."""

    kind: str
    target: str  # an engine name, or "router"
    params: Mapping[str, Any] = field(default_factory=dict)
    inverse: Mapping[str, Any] | None = None
    risk: Risk = "low"
    description: str = ""

    @property
    def id(self) -> str:
        """Stable identity of this action (kind, target, parameters)."""
        raw = json.dumps([self.kind, self.target, dict(self.params)], sort_keys=True, default=str)
        return "act-" + hashlib.sha1(raw.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "action": self.kind, "target": self.target,
                "params": {k: _num(v) for k, v in self.params.items()},
                "inverse": dict(self.inverse) if self.inverse is not None else None, "risk": self.risk,
                "description": self.description or ACTION_KINDS.get(self.kind, "")}


def fingerprint(playbook: str, engine: str, onset: float) -> str:
    """A finding's stable id: the same incident keeps the same id across runs (dedupe, approvals)."""
    raw = f"{playbook}|{engine}|{round(onset, 3)}"
    return "fnd-" + hashlib.sha1(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Finding:
    """What is wrong on one engine, how sure, why, and what to do."""

    playbook: str
    engine: str
    severity: Severity
    confidence: float
    summary: str
    evidence: tuple[Evidence, ...]
    remedies: tuple[Action, ...]
    runbook: str
    onset: float
    title: str = ""
    # "firing": held its playbook's `for`; "pending": holds but not for long enough yet (not in the exit code)
    status: Literal["firing", "pending"] = "firing"
    for_s: float = 0.0  # the playbook's `for`
    held_s: float = 0.0  # how long the condition has held (onset to this evaluation)
    note: str = ""  # why a pending condition cannot count yet (e.g. too few requests to judge)

    @property
    def id(self) -> str:
        return fingerprint(self.playbook, self.engine, self.onset)

    @property
    def fires_in_s(self) -> float:
        """For a pending condition: how much longer it must hold before it is reported."""
        return max(0.0, self.for_s - self.held_s)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "id": self.id, "playbook": self.playbook, "title": self.title, "engine": self.engine,
            "severity": self.severity, "confidence": round(self.confidence, 2), "summary": self.summary,
            "onset": _num(self.onset), "status": self.status, "for_s": _num(float(self.for_s)),
            "held_s": _num(float(self.held_s)),
            "evidence": [e.to_dict() for e in self.evidence],
            "remedies": [a.to_dict() for a in self.remedies],
            "runbook": self.runbook,
        }
        if self.status == "pending":
            out["fires_in_s"] = _num(float(self.fires_in_s))
        if self.note:
            out["note"] = self.note
        return out

    def text(self) -> str:
        if self.status == "pending":
            when = (f"held {self.held_s:.0f}s of its {self.for_s:.0f}s `for`; reported in {self.fires_in_s:.0f}s "
                    "if it holds")
            lines = [f"[PENDING {self.severity}] {self.engine}: {self.summary} ({self.playbook}; {when})"]
            if self.note:
                lines.append(f"    note: {self.note}")
            lines += [f"    because {e.text()}" for e in self.evidence]
            return "\n".join(lines)
        lines = [f"[{self.severity.upper()}] {self.engine}: {self.summary} "
                 f"({self.playbook}, confidence {self.confidence:.0%})"]
        lines += [f"    because {e.text()}" for e in self.evidence]
        for i, action in enumerate(self.remedies, 1):
            params = ", ".join(f"{k}={v}" for k, v in action.params.items())
            lines.append(f"    remedy {i}: {action.kind} on {action.target}" + (f" ({params})" if params else ""))
        lines.append(f"    runbook: {self.runbook}")
        return "\n".join(lines)


def worst(findings: list[Finding]) -> str:
    """Report status from findings: critical, warning, else ok (info findings are chances, not problems)."""
    rank = max((SEVERITY_RANK[f.severity] for f in findings), default=0)
    return {2: "critical", 1: "warning"}.get(rank, "ok")


def confidence_from(agreeing: int, considered: int) -> float:
    """Confidence grows with the independent signals that agree: 0.5 for the primary one alone, up to 0.95."""
    if considered <= 0:
        return 0.5
    return round(min(0.95, 0.5 + 0.45 * agreeing / considered), 2)
