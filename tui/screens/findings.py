"""The findings screen: active and pending findings, worst first; the highlighted one's evidence (value, threshold,
window), remedies and its action; `a`/`r`/`b` approve, reject or roll back that action (each asks first)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from tui.cells import SEVERITY_STYLE, finding_detail
from tui.model import FindingRow, State, matches
from tui.screens.base import TableScreen

DECISION_KEYS: list[BindingType] = [
    Binding("a", "decide('approve')", "Approve"), Binding("r", "decide('reject')", "Reject"),
    Binding("b", "decide('rollback')", "Rollback")]


class FindingsScreen(TableScreen):
    BINDINGS: ClassVar[list[BindingType]] = DECISION_KEYS

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        table: DataTable[Text] = DataTable(id="findings", cursor_type="row", zebra_stripes=True)
        for key, header in (("severity", "severity"), ("status", "status"), ("engine", "engine"),
                            ("playbook", "playbook"), ("action", "action"), ("summary", "summary")):
            table.add_column(header, key=key)
        yield table
        with VerticalScroll(id="detail-box"):
            yield Static(id="detail")
        yield from self.compose_filter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action == "decide" and self.host().read_only)

    def rows(self, state: State) -> list[FindingRow]:
        out = []
        for f in state.findings:
            if self.needle and not matches(f"{f.severity} {f.status} {f.engine} {f.playbook} {f.summary}", self.needle):
                continue
            out.append(f)
        return out

    def show(self, state: State) -> None:
        self.refresh_status()
        rows = []
        for f in self.rows(state):
            action = state.action_for(f)
            rows.append((f.id, [Text(f.severity.upper(), style=SEVERITY_STYLE.get(f.severity, "")),
                                Text(f.status), Text(f.engine), Text(f.playbook),
                                Text(action.status if action else "-",
                                     style="bold yellow" if action and action.status == "pending" else ""),
                                Text(f.summary[:70])]))
        self.fill(rows)
        if not rows:
            self.query_one("#detail", Static).update(Text("no findings: every engine reads healthy", style="green"))
        self.show_detail()

    def selected(self) -> FindingRow | None:
        state, key = self.host().state, self.selected_key()
        if state is None or key is None:
            return None
        return next((f for f in state.findings if f.id == key), None)

    def show_detail(self) -> None:
        f, state = self.selected(), self.host().state
        if f is None or state is None:
            return
        self.query_one("#detail", Static).update(finding_detail(f, state.action_for(f), self.host().clock()))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail()

    def action_decide(self, verb: str) -> None:
        f, state = self.selected(), self.host().state
        if f is None or state is None:
            self.notify("no finding selected", severity="warning")
            return
        action = state.action_for(f)
        if action is None:
            self.notify(f"{f.playbook} on {f.engine} has no action record (the mode did not plan one)",
                        severity="warning")
            return
        self.host().ask_decision(verb, action, f)
