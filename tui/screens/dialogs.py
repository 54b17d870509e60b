"""Modal dialogs: the confirmation of a decision (it shows what was captured when it opened and never changes
while open; Cancel has the focus), and the key help."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.decision import Frozen

HELP = """\
Keys
  1 fleet  2 findings  3 actions   Enter open the engine   Esc back, clear the filter
  /  filter the rows as you type   p pause   + / -  refresh faster / slower
  a approve  r reject  b roll back the selected action (each asks first;
     none of them with --read-only)
  t / e / i  heatmap of TTFT / e2e / ITL; l  the engine's log (engine screen)
  ctrl+p  palette: jump to an engine, finding, playbook or action; themes;
          SVG screenshot          ?  this help     q  quit
"""


class ConfirmDecision(ModalScreen[bool]):
    """Yes/No on one decision, over the frozen view of the action."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("y", "yes", "Yes"), Binding("n,escape", "no", "No")]
    DEFAULT_CSS = """
    ConfirmDecision { align: center middle; }
    ConfirmDecision > Vertical { width: 76; max-width: 100%; height: auto; border: thick $warning;
                                 background: $surface; padding: 0 1; }
    ConfirmDecision Horizontal { height: auto; align-horizontal: right; }
    """

    def __init__(self, frozen: Frozen) -> None:
        super().__init__()
        self.frozen = frozen

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.frozen.title(), id="confirm-title", classes="bold")
            yield Static("\n".join(self.frozen.lines()), id="confirm-body")
            with Horizontal():
                yield Button(f"Yes, {self.frozen.verb} (y)", id="yes", variant="warning")
                yield Button("Cancel (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: 100; max-width: 100%; height: auto; border: round $primary; background: $surface;
                          padding: 0 1; }
    """

    def __init__(self, read_only: bool, legend: str) -> None:
        super().__init__()
        self.read_only = read_only
        self.legend = legend

    def compose(self) -> ComposeResult:
        text = HELP + ("\nread-only: no key changes anything.\n" if self.read_only else "") + "\n" + self.legend
        yield Static(text)

    def action_close(self) -> None:
        self.dismiss(None)
