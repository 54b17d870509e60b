"""The latency heatmap widget: time across (newest on the right), latency buckets up (slowest on top), each cell's
shade and colour the requests in that bucket in that interval; `5` and `9` mark each column's P50 and P99 bucket.
Shades carry the counts, so it reads the same with NO_COLOR."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from tui.heatmap import LAYOUT, RESET, Grid, Read, bound_label, grid, level, merged, trimmed

SHADES = " ░▒▓█"
COLOURS = ("", "on #1d3b5a", "on #2e6d8e", "on #c98a2b", "on #d4443b")
LABEL_W = 7


def render_grid(g: Grid | None, *, width: int, height: int, title: str) -> Text:
    """The heatmap as text: a title line, the rows, a marks line (resets, layout changes) and a legend."""
    out = Text(title + "\n", style="bold")
    if g is None:
        out.append("no histogram yet: it needs two reads of the engine (the next cycles give them)\n", style="dim")
        return out
    first, last = trimmed(g)
    view = merged(g, first, last, max(1, height - 3))
    peak = view.peak
    p50 = [view.quantile_row(c, 0.5) for c in range(len(view.columns))]
    p99 = [view.quantile_row(c, 0.99) for c in range(len(view.columns))]
    for row in reversed(range(len(view.bounds))):
        out.append(f"{bound_label(view.bounds[row]):>{LABEL_W - 1}} ", style="dim")
        run, run_style = "", "dim"
        for c, counts in enumerate(view.columns):  # cells of one style go out as one span: far cheaper to draw
            if counts is None:
                ch, style = "·", "dim"
            else:
                lv = level(counts[row], peak, len(SHADES) - 1)
                mark = "9" if p99[c] == row else "5" if p50[c] == row else ""
                ch, style = mark or SHADES[lv], (COLOURS[lv] + (" bold" if mark else "")).strip()
            if style != run_style and run:
                out.append(run, style=run_style)
                run = ""
            run, run_style = run + ch, style
        out.append(run, style=run_style)
        out.append("\n")
    marks = "".join("R" if n == RESET else "L" if n == LAYOUT else " " for n in view.notes)
    out.append(" " * LABEL_W + marks + "\n", style="bold magenta")
    out.append(f"{' ' * LABEL_W}{len(view.columns)} x {view.column_s:g}s, max {peak:.0f} req/cell; "
               "5 P50, 9 P99, R reset, L layout change, · no read", style="dim")
    return out


class HeatmapView(Widget):
    """Draws `reads` (one histogram's successive reads) for the columns that fit."""

    DEFAULT_CSS = "HeatmapView { height: 1fr; min-height: 6; }"
    reads: reactive[tuple[Read, ...]] = reactive((), always_update=True)
    title: reactive[str] = reactive("latency")

    def __init__(self, *, now: float = 0.0, column_s: float = 2.0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.now = now
        self.column_s = column_s
        self._drawn: tuple[object, ...] | None = None

    def show(self, reads: tuple[Read, ...], *, now: float, column_s: float, title: str) -> None:
        """Draw these reads, unless they, the title and the current column are what is drawn already."""
        column_s = max(0.5, column_s)
        key = (len(reads), reads[-1].t if reads else None, title, column_s, int(now // column_s))
        if key == self._drawn:
            return
        self._drawn = key
        self.now, self.column_s = now, column_s
        self.title = title
        self.reads = reads

    def current(self) -> Grid | None:
        cols = max(1, self.size.width - LABEL_W)
        return grid(self.reads, now=self.now, columns=cols, column_s=self.column_s)

    def render(self) -> Text:
        return render_grid(self.current(), width=self.size.width, height=self.size.height, title=self.title)
