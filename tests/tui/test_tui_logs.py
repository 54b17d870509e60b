"""The logs screen: the tail of the engine's file, filtered as you type with context lines and the matches
highlighted, the doctor's parsed events marked; and its numbers (tail, view) on their own."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

from rich.text import Text
from textual.widgets import Static

from tests.tui.recorded import NOW, STATE, Recorded
from tui.app import DoctorApp
from tui.logtail import event_kinds, tail, view
from tui.screens.engine import EngineScreen
from tui.screens.logs import LogsScreen

LINES = [f"INFO line {i}" for i in range(10)]
LINES[4] = "ERROR This model's maximum context length is 32768 tokens. However, you requested 40000"
LINES[8] = "WARNING preempted request cmpl-1"


def test_tail_reads_the_end_and_drops_a_cut_line(tmp_path: Path) -> None:
    f = tmp_path / "engine.log"
    f.write_text("".join(f"line {i:04d}\n" for i in range(1000)))
    assert tail(f, max_bytes=10_000, max_lines=5) == [f"line {i:04d}" for i in range(995, 1000)]
    got = tail(f, max_bytes=25)  # 25 bytes: a cut line then two whole ones (10 bytes each)
    assert got == ["line 0998", "line 0999"]


def test_a_filter_keeps_matches_with_context_and_marks_gaps() -> None:
    shown = view(LINES, "error", context=1)
    assert [(s.index, s.match, s.gap_before) for s in shown] == [(3, False, False), (4, True, False), (5, False, False)]
    shown = view(LINES, "line 1", context=0)
    assert [s.index for s in shown] == [1]
    both = view(LINES, "request", context=0)
    assert [(s.index, s.gap_before) for s in both] == [(4, False), (8, True)]
    assert [s.index for s in view(LINES, "")] == list(range(10))


def test_the_doctors_events_are_found_in_the_lines() -> None:
    events = [{"kind": "prompt_too_long", "message": "This model's maximum context length is 32768 tokens"}]
    assert event_kinds(LINES, events) == {4: "prompt_too_long"}
    assert view(LINES, "", events=events)[4].event == "prompt_too_long"


def test_the_logs_screen_filters_as_you_type(tmp_path: Path) -> None:
    log = tmp_path / "hot.log"
    log.write_text("\n".join(LINES) + "\n")
    doc = copy.deepcopy(STATE)
    doc["engines"][0]["log"] = str(log)
    app = DoctorApp(Recorded(doc), refresh_s=3600, clock=lambda: NOW)

    def shown() -> str:
        content = app.screen.query_one("#log", Static).content
        return content.plain if isinstance(content, Text) else str(content)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("enter")
            assert isinstance(app.screen, EngineScreen)
            await pilot.press("l")
            assert isinstance(app.screen, LogsScreen)
            await app.screen.workers.wait_for_complete()
            await pilot.pause()
            assert "INFO line 0" in shown() and "◆ prompt_too_long ERROR This model" in shown()
            await pilot.press("slash", *"preempt")
            await app.screen.workers.wait_for_complete()
            await pilot.pause()
            text = shown()
            assert "WARNING preempted request cmpl-1" in text and "INFO line 7" in text  # a context line
            assert "INFO line 0" not in text
            await pilot.press("escape")
            assert isinstance(app.screen, EngineScreen)

    asyncio.run(scenario())
