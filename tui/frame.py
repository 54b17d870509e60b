"""`doctor tui --once`: one text frame of the fleet, the router's policy, the findings and the pending actions, for
scripts and bug reports (plain text unless colour is asked for)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tui.cells import FLEET_COLUMNS, action_cells, cell, evidence_line, policy_line
from tui.model import State
from tui.timeline import Timeline, timeline_text


def frame(state: State, *, source: str, now: float, width: int = 120, color: bool = False,
          timeline: Timeline | None = None) -> str:
    """The frame as text (with a sim scenario's `timeline` line when given)."""
    console = Console(file=io.StringIO(), width=width, color_system="standard" if color else None,
                      force_terminal=color, no_color=not color, highlight=False, emoji=False)
    cycles = f", cycle {state.cycles}" if state.cycles is not None else ""
    role = {"leader": ", leader", "standby": ", STANDBY (another replica acts"
            + (f": {state.leader_why}" if state.leader_why else "") + ")"}.get(state.leader_role or "", "")
    console.print(Text(f"doctor tui — {source} — status {state.status} at {state.generated_at or 'never'}{cycles}"
                       f"{role}", style="bold"))
    if timeline is not None:
        console.print(timeline_text(timeline, state, now))
    console.print(policy_line(state, now))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for c in FLEET_COLUMNS:
        table.add_column(c.header, no_wrap=True)
    for e in state.engines:
        table.add_row(*[cell(c, e) for c in FLEET_COLUMNS])
    console.print(table)
    firing = [f for f in state.findings if f.status == "firing"]
    pending = [f for f in state.findings if f.status == "pending"]
    console.print(Text(f"findings: {len(firing)} active, {len(pending)} pending", style="bold"))
    for f in state.findings:
        tag = f.severity.upper() if f.status == "firing" else f"PENDING {f.severity}"
        console.print(f"[{tag}] {f.engine}/{f.playbook}: {f.summary}", markup=False)
        for ev in f.evidence:
            console.print(f"    because {evidence_line(ev)}", markup=False)
    waiting = [a for a in state.actions if a.status == "pending"]
    if waiting:
        console.print(Text(f"actions waiting for approval: {len(waiting)}", style="bold"))
        for a in waiting:
            console.print(Text("  ").append(Text(" ").join(action_cells(a, now)[:4])))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return str(out)
