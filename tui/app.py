"""The doctor's Textual app: reads the state on a timer in a worker (a tick is skipped while the previous read runs,
so a slow daemon or engine never blocks the screen), listens to the daemon's events for a prompt refresh, says
when the daemon went away and when it came back (restarted or not), and sends people's decisions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import Provider
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.timer import Timer

from tui.commands import Jumps
from tui.decision import Frozen, allowed
from tui.model import ActionRow, FindingRow, State, parse_state
from tui.screens.actions import ActionsScreen
from tui.screens.base import DoctorScreen, TableScreen
from tui.screens.dialogs import ConfirmDecision, HelpScreen
from tui.screens.engine import EngineScreen
from tui.screens.findings import FindingsScreen
from tui.screens.fleet import FleetScreen
from tui.source import Source, SourceError
from tui.thresholds import LEGEND
from tui.timeline import Timeline, read_timeline, timeline_text

SCREENS = Binding.Group("Screens", compact=True)  # one footer item "123 Screens": the footer keeps to 80 columns
RATES = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
CSS = """
.status { height: 1; background: $panel; }
#policy { height: auto; }
#timeline { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
#summary { height: auto; }
.dim, #legend { color: $text-muted; }
.hidden { display: none; }
DataTable { height: auto; max-height: 12; }
#detail-box { height: 1fr; }
#sparks { height: 4; }
.spark { width: 1fr; padding: 0 1; }
Sparkline { height: 2; }
#events { height: auto; max-height: 6; }
"""


class DoctorApp(App[None]):
    """`source` gives the state and takes decisions; `clock` is only for what the screen says (ages); `timeline`: a
    sim scenario's timeline file (tui.timeline), read with each state."""

    TITLE = "doctor"
    CSS = CSS
    COMMANDS: ClassVar[set[type[Provider] | Callable[[], type[Provider]]]] = App.COMMANDS | {Jumps}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("p", "pause", "Pause"),
        # + and - are in the help screen (and the status line says the rate): the footer keeps to 80 columns
        Binding("plus,equals_sign", "rate(-1)", "Faster", key_display="+", show=False),
        Binding("minus", "rate(1)", "Slower", key_display="-", show=False),
        Binding("1", "go('fleet')", "Fleet", group=SCREENS),
        Binding("2", "go('findings')", "Findings", group=SCREENS),
        Binding("3", "go('actions')", "Actions", group=SCREENS),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, source: Source, *, refresh_s: float = 1.0, read_only: bool = False, who: str = "someone",
                 clock: Callable[[], float] = time.time, listen: bool = True, timeline: Path | None = None) -> None:
        super().__init__()
        self.timeline_file = timeline
        self.timeline: Timeline | None = None
        self.source = source
        self.refresh_s = refresh_s
        self.read_only = read_only or not source.can_decide
        self.who = who
        self.clock = clock
        self.listen = listen
        self.state: State | None = None
        self.paused = False
        self.reads = 0  # states read
        self.skipped = 0  # ticks skipped because the previous read still ran
        self.problem: str | None = None  # why the last read failed
        self.down_since: float | None = None
        self._busy = False
        self._again = False
        self._histograms: str | None = None
        self._last_cycles: int | None = None
        self._timer: Timer | None = None
        self.said: list[str] = []  # every notification, in order (what a person was told)

    # -- life

    def say(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
            timeout: float = 6.0) -> None:
        """Tell the person (a toast), and keep it in `said`."""
        self.said.append(f"{title}: {message}" if title else message)
        self.notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def on_mount(self) -> None:
        self.push_screen(FleetScreen())
        self._timer = self.set_interval(self.refresh_s, self.tick)
        self.tick()
        stream = self.source.events() if self.listen else None
        if stream is not None:
            self.run_worker(self._listen(stream), group="events", exit_on_error=False)

    async def on_unmount(self) -> None:
        await self.source.aclose()

    def tick(self) -> None:
        """Start a read unless paused or one is still running (then the tick is skipped, not queued)."""
        if self.paused:
            return
        if self._busy:
            self.skipped += 1
            return
        self._busy = True
        self.run_worker(self._read(), group="read", exit_on_error=False)

    def refresh_now(self) -> None:
        """Read as soon as possible (after a decision, or an event): now, or right after the running read."""
        if self._busy:
            self._again = True
        else:
            self.tick()

    async def _read(self) -> None:
        try:
            doc = await self.source.state(histograms=self._histograms)
        except SourceError as exc:
            self._failed(str(exc))
        else:
            if self.timeline_file is not None:
                self.timeline = read_timeline(self.timeline_file)
            self._got(parse_state(doc))
        finally:
            self._busy = False
        if self._again and not self.paused:
            self._again = False
            self.tick()

    def _failed(self, why: str) -> None:
        first = self.problem is None
        self.problem = why
        if self.down_since is None:
            self.down_since = self.clock()
        if first:
            self.say(f"{why}; retrying every {self.refresh_s:g}s (the last state stays on screen)",
                        title="lost the state", severity="error", timeout=10)
        self._redraw()

    def _got(self, state: State) -> None:
        restarted = state.cycles is not None and self._last_cycles is not None and state.cycles < self._last_cycles
        if self.problem is not None:
            away = self.clock() - (self.down_since or self.clock())
            self.say(f"reconnected after {away:.0f}s" + ("; the daemon restarted" if restarted else ""),
                        title="back", severity="information", timeout=10)
        elif restarted:
            self.say(f"the daemon restarted (cycle {self._last_cycles} -> {state.cycles})", title="restarted",
                        timeout=10)
        self.problem, self.down_since = None, None
        self._last_cycles = state.cycles
        self.state = state
        self.reads += 1
        self._redraw()

    async def _listen(self, stream: AsyncIterator[tuple[str, dict[str, Any]]] | None) -> None:
        """Refresh on each of the daemon's events; open the stream again after it breaks (the reads say why)."""
        while stream is not None:
            try:
                async for _kind, _data in stream:
                    self.refresh_now()
            except SourceError:
                pass
            await asyncio.sleep(max(1.0, self.refresh_s))
            stream = self.source.events()

    def _redraw(self) -> None:
        screen = self.screen
        if isinstance(screen, DoctorScreen):
            screen.refresh_status()
            if self.state is not None:
                screen.show(self.state)

    # -- what screens ask (tui.screens.base.Host)

    def status_text(self) -> Text:
        now = self.clock()
        out = Text()
        out.append(f" {self.source.label} ", style="bold reverse")
        if self.problem is not None:
            away = now - (self.down_since or now)
            out.append(f" UNREACHABLE {away:.0f}s: {self.problem[:80]} ", style="bold reverse red")
        elif self.state is not None:
            s = self.state
            out.append(f" {s.status} ", style={"critical": "bold reverse red", "warning": "bold yellow"}.get(s.status,
                                                                                                             "green"))
            cycles = f" cycle {s.cycles}" if s.cycles is not None else ""
            out.append(f" at {s.generated_at or 'never'}{cycles}")
            if s.leader_role == "standby":  # it reads and judges; the other replica acts
                out.append(" STANDBY ", style="bold reverse yellow")
            elif s.leader_role == "leader":
                out.append(" leader", style="bold")
        else:
            out.append(" reading…")
        out.append(f"  every {self.refresh_s:g}s")
        if self.paused:
            out.append("  PAUSED", style="bold reverse yellow")
        if self.read_only:
            out.append("  read-only", style="bold")
        return out

    def timeline_text(self) -> Text | None:
        """Where the sim scenario is (baseline, incident, fix), when the TUI was given its timeline."""
        return None if self.timeline is None else timeline_text(self.timeline, self.state, self.clock())

    def open_engine(self, name: str) -> None:
        self.push_screen(EngineScreen(name))

    def jump(self, screen: str, select: str | None, needle: str) -> None:
        """Show `screen` (engine, findings, actions) with the row `select` selected, or the rows `needle` keeps."""
        if isinstance(self.screen, ModalScreen):
            return
        while len(self.screen_stack) > 2:
            self.pop_screen()
        if screen == "engine" and select is not None:
            self.push_screen(EngineScreen(select))
        elif screen == "findings":
            self.push_screen(FindingsScreen(select=select, needle=needle))
        elif screen == "actions":
            self.push_screen(ActionsScreen(select=select, needle=needle))

    def want_histograms(self, engine: str | None) -> None:
        changed = engine != self._histograms
        self._histograms = engine
        if changed and engine is not None:
            self.refresh_now()

    def ask_decision(self, verb: str, action: ActionRow, finding: FindingRow | None) -> None:
        if self.read_only:
            self.say("read-only: nothing can be changed from here", severity="warning")
            return
        why = allowed(verb, action)
        if why is not None:
            self.say(why, severity="warning")
            return
        frozen = Frozen(verb, action, finding, self.clock())

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_worker(self._decide(frozen), group="decide", exit_on_error=False)
            else:
                self.say(f"{verb} {action.id}: cancelled; nothing changed")

        self.push_screen(ConfirmDecision(frozen), answered)

    async def _decide(self, frozen: Frozen) -> None:
        try:
            res = await self.source.decide(frozen.verb, frozen.action.id, f"person:{self.who}", "from doctor tui")
        except SourceError as exc:
            self.say(f"{frozen.verb} {frozen.action.id}: {exc}", severity="error", timeout=10)
            return
        ok = res.get("result") == "ok"
        self.say(str(res.get("text") or res.get("result")), title=f"{frozen.verb} {frozen.action.id}",
                    severity="information" if ok else "warning", timeout=8)
        self.refresh_now()

    # -- keys

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.read_only, LEGEND))

    def action_pause(self) -> None:
        self.paused = not self.paused
        if self._timer is not None:
            (self._timer.pause if self.paused else self._timer.resume)()
        self._redraw()

    def action_rate(self, step: int) -> None:
        i = min(range(len(RATES)), key=lambda k: abs(RATES[k] - self.refresh_s))
        self.refresh_s = RATES[max(0, min(len(RATES) - 1, i + step))]
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_interval(self.refresh_s, self.tick, pause=self.paused)
        self._redraw()

    def action_go(self, name: str) -> None:
        if isinstance(self.screen, ModalScreen):
            return  # a dialog answers first
        while len(self.screen_stack) > 2 and not isinstance(self.screen, FleetScreen):
            self.pop_screen()
        if name == "findings":
            self.push_screen(FindingsScreen())
        elif name == "actions":
            self.push_screen(ActionsScreen())

    async def action_back(self) -> None:
        screen = self.screen
        if isinstance(screen, ModalScreen):
            return
        if isinstance(screen, TableScreen) and screen.clear_filter():
            return
        if len(self.screen_stack) > 2:
            self.pop_screen()
