"""A sim scenario's timeline (`doctor tui --timeline FILE`, written by `doctor sim scenario` and `doctor demo`):
where the run is, baseline -> incident -> fix. The phases and their start come from the file; the fix is the
doctor's own, seen in the state's actions (the first one applied or verified after the incident began).
A missing or malformed file shows nothing, never an exception."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text

from tui.model import State

FIXED = ("applied", "verified")


@dataclass(frozen=True)
class Phase:
    name: str
    at_s: float
    note: str = ""


@dataclass(frozen=True)
class Timeline:
    scenario: str
    started_at: float  # Unix time of t=0
    phases: tuple[Phase, ...]  # by start
    end_s: float | None = None
    expected: str = ""

    def incident_at(self) -> float | None:
        """Unix time the incident began (None: a run without one)."""
        at = next((p.at_s for p in self.phases if p.name != "baseline"), None)
        return None if at is None else self.started_at + at


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def parse_timeline(doc: Mapping[str, Any]) -> Timeline | None:
    started = _num(doc.get("started_at"))
    raw = doc.get("phases")
    if started is None or not isinstance(raw, list):
        return None
    phases = sorted((Phase(str(p.get("name", "?")), at, str(p.get("note") or ""))
                     for p in raw if isinstance(p, dict) and (at := _num(p.get("at_s"))) is not None),
                    key=lambda p: p.at_s)
    if not phases:
        return None
    return Timeline(str(doc.get("scenario") or "scenario"), started, tuple(phases), _num(doc.get("end_s")),
                    str(doc.get("expected") or ""))


def read_timeline(path: Path) -> Timeline | None:
    """The file's timeline, or None while it is not there (the scenario has not started) or unreadable."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return parse_timeline(doc) if isinstance(doc, dict) else None


def fix_of(tl: Timeline, state: State | None) -> tuple[float, str] | None:
    """(Unix time, "kind on target") of the first fix applied since the incident began, if any."""
    start = tl.incident_at()
    if start is None or state is None:
        return None
    done = [(a.updated_at, f"{a.kind} on {a.target}") for a in state.actions
            if a.status in FIXED and a.updated_at is not None and a.updated_at >= start]
    return min(done) if done else None


def timeline_text(tl: Timeline, state: State | None, now: float) -> Text:
    """One line: the scenario, t, and each phase with its start, the current one highlighted, the fix last."""
    t = now - tl.started_at
    fix = fix_of(tl, state)
    current = "fix" if fix is not None else next((p.name for p in reversed(tl.phases) if p.at_s <= t), "baseline")
    out = Text(no_wrap=True, overflow="ellipsis")  # one line, also at 80 columns
    out.append(f"{tl.scenario} ", style="bold")
    out.append(f"t={max(0.0, t):.0f}s ")
    marks = [(p.name, f"{p.name} {p.at_s:.0f}s") for p in tl.phases]
    marks.append(("fix", f"fix {fix[0] - tl.started_at:.0f}s" if fix is not None else "fix ?"))
    for i, (name, label) in enumerate(marks):
        if i:
            out.append(">", style="dim")
        style = ("bold reverse red" if name == "incident" else "bold reverse green" if name == "fix"
                 else "bold reverse") if name == current else "dim"
        out.append(f" {label} " if name == current else label, style=style)
    following = next((p for p in tl.phases if p.at_s > t), None)
    if fix is not None:
        out.append(f"  {fix[1]}")
    elif following is not None:
        out.append(f"  {following.name} in {following.at_s - t:.0f}s", style="bold")
    elif tl.expected and current != "baseline":
        out.append(f"  expect {tl.expected.split(' ')[0]}", style="dim")
    return out
