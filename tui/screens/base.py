"""What every screen shares: the app it runs in (seen through `Host`, so screens never import the app), a status
line, and for table screens the `/` filter."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static
from textual.widgets.data_table import CellDoesNotExist

from tui.model import ActionRow, FindingRow, State


class Host(Protocol):
    """The app as screens see it."""

    state: State | None
    read_only: bool
    clock: Callable[[], float]

    def status_text(self) -> Text: ...

    def timeline_text(self) -> Text | None: ...

    def ask_decision(self, verb: str, action: ActionRow, finding: FindingRow | None) -> None: ...

    def open_engine(self, name: str) -> None: ...

    def want_histograms(self, engine: str | None) -> None: ...

    def jump(self, screen: str, select: str | None, needle: str) -> None: ...


class DoctorScreen(Screen[None]):
    """A screen that shows the latest state (`show`), called on every new state and when it comes back on top."""

    def host(self) -> Host:
        return cast(Host, self.app)

    def compose_status(self) -> ComposeResult:
        yield Static(id="status", classes="status")

    def histograms_for(self) -> str | None:
        """The engine whose raw latency histograms this screen needs in the state (None: none)."""
        return None

    def on_screen_resume(self) -> None:
        self.host().want_histograms(self.histograms_for())
        state = self.host().state
        self.refresh_status()
        if state is not None:
            self.show(state)

    def refresh_status(self) -> None:
        for w in self.query("#status"):
            if isinstance(w, Static):
                w.update(self.host().status_text())

    def show(self, state: State) -> None:
        """Draw `state` (screens override)."""

    def on_resize(self) -> None:
        """Under 100 columns the footer leaves out `^p palette` (the help screen names it) to keep the keys whole."""
        for footer in self.query(Footer):
            footer.show_command_palette = self.size.width >= 100


class TableScreen(DoctorScreen):
    """A screen built round one DataTable whose rows `/` filters as you type (Esc clears the filter)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("slash", "filter", "Filter")]

    def __init__(self, *, select: str | None = None, needle: str = "") -> None:
        super().__init__()
        self.select_key = select  # the row to put the cursor on once it is there (the command palette's jumps)
        self.needle = needle

    def compose_filter(self) -> ComposeResult:
        yield Input(self.needle, placeholder="filter: words to match, Esc clears", id="filter",
                    classes="" if self.needle else "hidden")
        yield Footer()

    def table(self) -> DataTable[Text]:
        return self.query_one(DataTable)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("hidden")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.needle = event.value
            if self.host().state is not None:
                self.show(cast(State, self.host().state))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.table().focus()

    def clear_filter(self) -> bool:
        """Esc: clear and hide the filter; False when there was none."""
        box = self.query_one("#filter", Input)
        if box.has_class("hidden") and not self.needle:
            return False
        box.value = ""
        self.needle = ""
        box.add_class("hidden")
        self.table().focus()
        if self.host().state is not None:
            self.show(cast(State, self.host().state))
        return True

    def fill(self, rows: list[tuple[str, list[Text]]]) -> None:
        """Replace the table's rows (keyed), keeping the cursor on the same key where it is still there."""
        table = self.table()
        keep = self.selected_key()
        if self.select_key is not None and self.select_key in [k for k, _ in rows]:
            keep, self.select_key = self.select_key, None
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        keys = [k for k, _ in rows]
        if keep in keys:
            table.move_cursor(row=keys.index(keep), animate=False)

    def selected_key(self) -> str | None:
        table = self.table()
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except CellDoesNotExist:  # the cursor outside the rows (a refresh removed them)
            return None
        return None if key.value is None else str(key.value)
