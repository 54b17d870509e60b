"""The timeline file a running scenario (or `doctor demo`) leaves for `doctor tui --timeline FILE`.

A small JSON document: which scenario, when its t=0 was (Unix time), its phases (baseline, incident, and what
comes after) with their start in seconds from t=0, and what the doctor is expected to find. The TUI reads it
(tui.timeline) and shows where the run is; the fix is the doctor's own: the TUI sees it in the state's actions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sim.scenarios import Scenario

VERSION = 1


@dataclass(frozen=True)
class PhaseMark:
    """One phase: its name (baseline, incident, ...), when it starts (s from t=0) and a note for people."""

    name: str
    at_s: float
    note: str = ""


def scenario_phases(sc: Scenario) -> list[PhaseMark]:
    """Baseline from t=0, then the incident at its onset (with what happens then), when the scenario has one."""
    if sc.onset_s is None:
        return [PhaseMark("baseline", 0.0, "healthy traffic, no incident")]
    at_onset = [i.describe().split(": ", 1)[-1] for i in sc.timeline if i.kind != "standing" and i.at_s == sc.onset_s]
    standing = [i.describe().split(": ", 1)[-1] for i in sc.timeline if i.kind == "standing"]
    return [PhaseMark("baseline", 0.0, "healthy traffic" + (f"; {standing[0]}" if standing else "")),
            PhaseMark("incident", sc.onset_s, "; ".join(at_onset) or "symptom onset")]


def write_timeline(path: Path, *, name: str, description: str, started_at: float, phases: Sequence[PhaseMark],
                   end_s: float, expected: str = "") -> None:
    """Write the document atomically (the TUI may read it at any moment)."""
    doc = {"version": VERSION, "scenario": name, "description": description, "started_at": started_at,
           "end_s": end_s, "expected": expected, "phases": [asdict(p) for p in phases]}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def expected_of(sc: Scenario) -> str:
    """"p99_spike on cold -> length_limit", or "" for a healthy run."""
    if not sc.expected_playbook:
        return ""
    return f"{sc.expected_playbook} on {sc.expected_engine or 'any engine'} -> {sc.expected_remedy}"
