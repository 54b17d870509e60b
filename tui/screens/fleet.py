"""The fleet screen: the router's policy on top, one row per engine (colours at the playbooks' thresholds, trends of
the last minutes), and what the findings and actions are waiting for. Enter opens the engine."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static

from tui.cells import FLEET_COLUMNS, cell, policy_line
from tui.model import State, matches
from tui.screens.base import TableScreen
from tui.thresholds import LEGEND


class FleetScreen(TableScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "open", "Engine", show=True)]

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield Static(id="timeline", classes="hidden")
        yield Static(id="policy")
        table: DataTable[Text] = DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        for c in FLEET_COLUMNS:
            table.add_column(c.header, key=c.key)
        yield table
        yield Static(id="summary")
        yield Static(LEGEND, id="legend", classes="dim")
        yield from self.compose_filter()

    def show(self, state: State) -> None:
        now = self.host().clock()
        self.refresh_status()
        timeline = self.host().timeline_text()
        shown = self.query_one("#timeline", Static)
        shown.set_class(timeline is None, "hidden")
        if timeline is not None:
            shown.update(timeline)
        self.query_one("#policy", Static).update(policy_line(state, now))
        rows = []
        for e in state.engines:
            cells = [cell(c, e) for c in FLEET_COLUMNS]
            if self.needle and not matches(" ".join(c.plain for c in cells), self.needle):
                continue
            rows.append((e.name, cells))
        self.fill(rows)
        firing = [f for f in state.findings if f.status == "firing"]
        pending = [f for f in state.findings if f.status == "pending"]
        waiting = [a for a in state.actions if a.status == "pending"]
        out = Text()
        out.append(f"findings: {len(firing)} active", style="bold red" if firing else "")
        for f in firing[:3]:
            out.append(f"  [{f.severity.upper()}] {f.engine}/{f.playbook}", style="bold")
        out.append(f"; {len(pending)} pending")
        if waiting:
            out.append(f"; {len(waiting)} action(s) waiting for approval (2: findings, 3: actions)",
                       style="bold yellow")
        unreachable = [e.name for e in state.engines if e.reachable is False]
        if unreachable:
            out.append(f"\nunreachable: {', '.join(unreachable)}", style="bold red")
        self.query_one("#summary", Static).update(out)

    def action_open(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.host().open_engine(key)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.host().open_engine(str(event.row_key.value))
