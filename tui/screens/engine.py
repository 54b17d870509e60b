"""One engine: its numbers, sparklines of the last minutes, the latency heatmap (`t` TTFT, `e` e2e, `i` ITL) from
its histogram deltas, and the events the doctor parsed from its log."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Label, Sparkline, Static

from tui.cells import FLEET_COLUMNS, cell, pct, rate, secs
from tui.heatmap import parse_reads
from tui.model import EngineRow, State
from tui.screens.base import DoctorScreen
from tui.screens.logs import LogsScreen
from tui.widgets.heatmap_view import HeatmapView

HISTOGRAMS = {"ttft": "time to first token", "e2e": "end-to-end latency", "itl": "inter-token latency"}
SPARKS = (("qps", "QPS", rate), ("p99_ttft_s", "P99 TTFT", secs), ("kv_cache_usage", "KV", pct),
          ("waiting", "waiting", rate))


class EngineScreen(DoctorScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "histogram('ttft')", "TTFT"), Binding("e", "histogram('e2e')", "E2E"),
        Binding("i", "histogram('itl')", "ITL"), Binding("l", "logs", "Logs")]

    def __init__(self, engine: str) -> None:
        super().__init__()
        self.engine = engine
        self.histogram = "ttft"

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield Static(id="numbers")
        with Horizontal(id="sparks"):
            for signal, title, _ in SPARKS:
                with Vertical(classes="spark"):
                    yield Label(title, id=f"label-{signal}")
                    yield Sparkline([], id=f"spark-{signal}")
        yield HeatmapView(id="heatmap")
        yield Static(id="events")
        yield Footer()

    def histograms_for(self) -> str | None:
        return self.engine

    def show(self, state: State) -> None:
        self.refresh_status()
        e = state.engine(self.engine)
        if e is None:
            self.query_one("#numbers", Static).update(Text(f"{self.engine}: not in the daemon's engines",
                                                           style="bold red"))
            return
        self.query_one("#numbers", Static).update(self._numbers(e))
        for signal, title, fmt in SPARKS:
            series = e.history.get(signal, ())
            self.query_one(f"#spark-{signal}", Sparkline).data = list(series)
            self.query_one(f"#label-{signal}", Label).update(f"{title} {fmt(e.get(signal))}")
        self._heatmap(e, state)
        self.query_one("#events", Static).update(self._events(e))

    def _numbers(self, e: EngineRow) -> Text:
        out = Text()
        out.append(f"{e.name}", style="bold")
        out.append(f" ({e.role or '-'}, vLLM profile {e.profile or '?'}) {e.url}\n")
        for c in FLEET_COLUMNS[3:]:
            if c.key.endswith("trend"):
                continue
            out.append(f"{c.header} ")
            out.append_text(cell(c, e))
            out.append("  ")
        if e.errors:
            out.append("\n" + "; ".join(e.errors[:2]), style="yellow")
        return out

    def _heatmap(self, e: EngineRow, state: State) -> None:
        view = self.query_one(HeatmapView)
        raw = (e.histograms or {}).get(self.histogram, [])
        reads = tuple(parse_reads(raw if isinstance(raw, list) else []))
        view.show(reads, now=self.host().clock(), column_s=state.interval_s or 2.0,
                  title=f"{HISTOGRAMS[self.histogram]} heatmap (t/e/i)")

    def _events(self, e: EngineRow) -> Text:
        if not e.events:
            return Text("no log events parsed (the engine's log is not configured, or it is quiet)", style="dim")
        out = Text("log events the doctor parsed:\n", style="bold")
        for ev in e.events[-5:]:
            out.append(f"  {ev.get('kind')}: {str(ev.get('message', ''))[:100]}\n")
        return out

    def action_logs(self) -> None:
        self.app.push_screen(LogsScreen(self.engine))

    def action_histogram(self, name: str) -> None:
        self.histogram = name
        state = self.host().state
        if state is not None:
            self.show(state)
