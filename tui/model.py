"""The state document (`GET /v1/state`) as typed rows for the screens and for `--once`: engines, findings,
actions and the router's policy. Missing or malformed parts become None or empty, never an exception."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


@dataclass(frozen=True)
class EngineRow:
    name: str
    role: str | None
    url: str
    reachable: bool | None
    profile: str | None
    health: str | None
    values: Mapping[str, float | None]
    history: Mapping[str, tuple[float, ...]]  # signal -> values, oldest first
    findings: int
    change_in_progress: bool
    errors: tuple[str, ...]
    events: tuple[Mapping[str, Any], ...]
    histograms: Mapping[str, list[Any]] | None
    log: str | None = None  # the engine's log file, where the config names one

    def get(self, signal: str) -> float | None:
        return self.values.get(signal)


@dataclass(frozen=True)
class FindingRow:
    id: str
    playbook: str
    engine: str
    severity: str
    status: str  # firing | pending
    summary: str
    confidence: float | None
    evidence: tuple[Mapping[str, Any], ...]
    remedies: tuple[Mapping[str, Any], ...]
    held_s: float | None
    for_s: float | None
    fires_in_s: float | None


@dataclass(frozen=True)
class ActionRow:
    id: str
    kind: str
    target: str
    params: Mapping[str, Any]
    status: str
    reason: str
    trigger: str
    engine: str
    playbook: str
    finding_id: str
    updated_at: float | None
    inverse: Mapping[str, Any] | None
    verify: Mapping[str, Any] | None
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    description: str
    steps: tuple[str, ...]

    @property
    def can_undo(self) -> bool:
        return self.status in ("applied", "verified") and bool(self.inverse)


@dataclass(frozen=True)
class State:
    generated_at: str | None
    status: str
    cycles: int | None
    interval_s: float | None
    engines: tuple[EngineRow, ...]
    findings: tuple[FindingRow, ...]  # firing first (worst first), then pending
    actions: tuple[ActionRow, ...]  # pending first, then the recent ones, newest first
    policy: Mapping[str, Any] | None
    router_url: str | None
    router_error: str | None
    mode: str | None = None
    alerts_waiting: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict)
    # "leader" or "standby" when the daemon takes part in a leader election ([serve.leader]); None when it acts
    # alone or the state does not say
    leader_role: str | None = None
    leader_why: str | None = None

    def engine(self, name: str) -> EngineRow | None:
        return next((e for e in self.engines if e.name == name), None)

    def action_for(self, finding: FindingRow) -> ActionRow | None:
        """The newest action record of a finding (pending first)."""
        return next((a for a in self.actions if a.finding_id == finding.id), None)


SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def _engine(doc: Mapping[str, Any]) -> EngineRow:
    signals = _dict(doc.get("signals"))
    values = {k: _num(v) for k, v in signals.items() if k not in ("health", "reasons", "too_few_requests")}
    history = {k: tuple(float(p[1]) for p in _list(v)
                        if isinstance(p, list) and len(p) == 2 and _num(p[1]) is not None)
               for k, v in _dict(doc.get("history")).items()}
    hist = doc.get("histograms")
    return EngineRow(str(doc.get("name", "?")), doc.get("role"), str(doc.get("url", "")), doc.get("reachable"),
                     doc.get("version_profile"), signals.get("health"), values, history,
                     len(_list(doc.get("findings"))), bool(doc.get("change_in_progress")),
                     tuple(str(e) for e in _list(doc.get("errors"))),
                     tuple(e for e in _list(doc.get("events")) if isinstance(e, dict)),
                     hist if isinstance(hist, dict) else None,
                     doc.get("log") if isinstance(doc.get("log"), str) else None)


def _finding(doc: Mapping[str, Any], status: str) -> FindingRow:
    return FindingRow(str(doc.get("id", "")), str(doc.get("playbook", "?")), str(doc.get("engine", "?")),
                      str(doc.get("severity", "info")), status, str(doc.get("summary", "")),
                      _num(doc.get("confidence")),
                      tuple(e for e in _list(doc.get("evidence")) if isinstance(e, dict)),
                      tuple(a for a in _list(doc.get("remedies")) if isinstance(a, dict)),
                      _num(doc.get("held_s")), _num(doc.get("for_s")), _num(doc.get("fires_in_s")))


def action_of(doc: Mapping[str, Any]) -> ActionRow:
    """An action record (`ActionRecord.to_dict()`)."""
    action = _dict(doc.get("action"))
    return ActionRow(str(doc.get("id", "")), str(action.get("action", "?")), str(action.get("target", "?")),
                     _dict(action.get("params")), str(doc.get("status", "?")), str(doc.get("reason") or ""),
                     str(doc.get("trigger", "")), str(doc.get("engine", "")), str(doc.get("playbook", "")),
                     str(doc.get("finding_id", "")), _num(doc.get("updated_at")),
                     doc.get("inverse") if isinstance(doc.get("inverse"), dict) else None,
                     doc.get("verify") if isinstance(doc.get("verify"), dict) else None,
                     _dict(doc.get("before")), _dict(doc.get("after")), str(action.get("description") or ""),
                     tuple(str(s) for s in _list(doc.get("steps"))))


def parse_state(doc: Mapping[str, Any]) -> State:
    """The typed state of one document."""
    engines = tuple(_engine(e) for e in _list(doc.get("engines")) if isinstance(e, dict))
    firing = sorted((_finding(f, "firing") for f in _list(doc.get("findings")) if isinstance(f, dict)),
                    key=lambda f: (SEVERITY_ORDER.get(f.severity, 3), f.engine, f.playbook))
    pending = [_finding(f, "pending") for f in _list(doc.get("pending")) if isinstance(f, dict)]
    acts = _dict(doc.get("actions"))
    seen: set[str] = set()
    actions: list[ActionRow] = []
    recent = sorted((a for a in _list(acts.get("recent")) if isinstance(a, dict)),
                    key=lambda a: -(_num(a.get("updated_at")) or 0.0))
    for rec in [*_list(acts.get("pending")), *recent]:
        if isinstance(rec, dict) and rec.get("id") not in seen:
            seen.add(str(rec.get("id")))
            actions.append(action_of(rec))
    router = _dict(doc.get("router"))
    policy = router.get("policy") if isinstance(router.get("policy"), dict) else None
    error = policy.get("error") if policy is not None and "error" in policy else None
    return State(doc.get("generated_at"), str(doc.get("status", "unknown")),
                 int(c) if isinstance(c := doc.get("cycles"), int) else None, _num(doc.get("interval_s")),
                 engines, (*firing, *pending), tuple(actions), None if error else policy, router.get("url"),
                 str(error) if error else None, doc.get("mode"),
                 len(_list(_dict(doc.get("alerts")).get("waiting"))), doc, *_leader(_dict(doc.get("leader"))))


def _leader(doc: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The daemon's role in its leader election, and why it may not act; (None, None) without an election."""
    role = doc.get("role")
    if not doc.get("store") or role not in ("leader", "standby"):
        return None, None
    why = doc.get("why")
    return str(role), str(why) if why else None


def matches(text: str, needle: str) -> bool:
    """The `/` filter: every word of `needle` in `text`, case-insensitive."""
    low = text.lower()
    return all(w in low for w in needle.lower().split())


def row_text(cells: Sequence[object]) -> str:
    return " ".join(str(c) for c in cells)
