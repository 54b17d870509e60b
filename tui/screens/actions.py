"""The actions screen (the audit trail of remedies): pending ones first, then the recent ones with their outcome
and verification; `a`/`r`/`b` approve, reject or roll back the highlighted one (each asks first)."""

from __future__ import annotations

import json
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from tui.cells import action_cells
from tui.model import ActionRow, State, matches
from tui.screens.base import TableScreen
from tui.screens.findings import DECISION_KEYS

HEADERS = ("id", "status", "action", "engine", "trigger", "updated", "reason")


def action_detail(a: ActionRow) -> Text:
    out = Text()
    out.append(f"{a.id}: {a.kind} on {a.target}  status {a.status}\n", style="bold")
    out.append(f"params {json.dumps(dict(a.params), default=str)}\n")
    if a.description:
        out.append(a.description + "\n")
    out.append(f"for {a.engine} / {a.playbook} (finding {a.finding_id}); trigger {a.trigger}\n")
    if a.reason:
        out.append(f"reason: {a.reason}\n")
    if a.verify:
        out.append(f"verify: {json.dumps(dict(a.verify), default=str)}\n")
    if a.before or a.after:
        out.append(f"before {json.dumps(dict(a.before), default=str)}\n")
        out.append(f"after  {json.dumps(dict(a.after), default=str)}\n")
    if a.inverse:
        out.append(f"undo: {a.inverse.get('action')} on {a.inverse.get('target')} "
                   f"{json.dumps(a.inverse.get('params', {}), default=str)}\n")
    for step in a.steps:
        out.append(f"  - {step}\n", style="dim")
    return out


class ActionsScreen(TableScreen):
    BINDINGS: ClassVar[list[BindingType]] = DECISION_KEYS

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        table: DataTable[Text] = DataTable(id="actions", cursor_type="row", zebra_stripes=True)
        for h in HEADERS:
            table.add_column(h, key=h)
        yield table
        with VerticalScroll(id="detail-box"):
            yield Static(id="detail")
        yield from self.compose_filter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action == "decide" and self.host().read_only)

    def show(self, state: State) -> None:
        self.refresh_status()
        now = self.host().clock()
        rows = []
        for a in state.actions:
            cells = action_cells(a, now)
            if self.needle and not matches(" ".join(c.plain for c in cells), self.needle):
                continue
            rows.append((a.id, cells))
        self.fill(rows)
        if not rows:
            self.query_one("#detail", Static).update(Text("no actions yet", style="dim"))
        self.show_detail()

    def selected(self) -> ActionRow | None:
        state, key = self.host().state, self.selected_key()
        if state is None or key is None:
            return None
        return next((a for a in state.actions if a.id == key), None)

    def show_detail(self) -> None:
        a = self.selected()
        if a is not None:
            self.query_one("#detail", Static).update(action_detail(a))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail()

    def action_decide(self, verb: str) -> None:
        a, state = self.selected(), self.host().state
        if a is None or state is None:
            self.notify("no action selected", severity="warning")
            return
        finding = next((f for f in state.findings if f.id == a.finding_id), None)
        self.host().ask_decision(verb, a, finding)
