"""One engine's log, live: the tail of its file (read in a worker on every refresh), filtered as you type (`/`),
matches highlighted with context lines around them, the lines the doctor parsed as events marked."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Input, Static

from tui.logtail import Shown, tail, view
from tui.model import State
from tui.screens.base import DoctorScreen


def draw(shown: list[Shown], needle: str) -> Text:
    out = Text()
    for s in shown:
        if s.gap_before:
            out.append("  …\n", style="dim")
        line = Text(s.text, style="" if s.match or not needle else "dim")
        if needle and s.match:
            line.highlight_words([needle.strip()], style="bold reverse", case_sensitive=False)
        if s.event:
            out.append(f"◆ {s.event} ", style="bold magenta")
        out.append_text(line)
        out.append("\n")
    return out


class LogsScreen(DoctorScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("slash", "filter", "Filter")]

    def __init__(self, engine: str) -> None:
        super().__init__()
        self.engine = engine
        self.needle = ""
        self._reading = False

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield Input(placeholder="filter as you type (Esc leaves)", id="log-filter")
        with VerticalScroll(id="log-box"):
            yield Static(id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log-box", VerticalScroll).focus()  # keys act on the screen until `/`

    def action_filter(self) -> None:
        self.query_one("#log-filter", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.needle = event.value
        state = self.host().state
        if state is not None:
            self.show(state)

    def show(self, state: State) -> None:
        self.refresh_status()
        engine = state.engine(self.engine)
        path = engine.log if engine is not None else None
        if not path:
            self.query_one("#log", Static).update(Text(
                f"{self.engine}: no log file is configured for it (the config's `log`, or --log)", style="dim"))
            return
        if not self._reading:
            self._reading = True
            self.run_worker(self._read(Path(path), engine.events if engine else ()), group="log", exit_on_error=False)

    async def _read(self, path: Path, events: tuple[Mapping[str, Any], ...]) -> None:
        try:
            lines = await asyncio.to_thread(tail, path)
        except OSError as exc:
            self.query_one("#log", Static).update(Text(f"cannot read {path}: {exc.strerror or exc}", style="yellow"))
            return
        finally:
            self._reading = False
        shown = view(lines, self.needle, events=events)
        self.query_one("#log", Static).update(draw(shown, self.needle) if shown else Text("no line matches",
                                                                                           style="dim"))
        box = self.query_one("#log-box", VerticalScroll)
        box.scroll_end(animate=False)
