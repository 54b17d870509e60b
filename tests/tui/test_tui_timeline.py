"""The sim scenario's timeline in the TUI: the file `doctor sim scenario` writes (sim.timeline_file) read by
tui.timeline, shown on the fleet screen and in `--once`: baseline -> incident -> fix, the fix being the first
action applied after the incident began."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Static

from sim.scenarios import SCENARIOS
from sim.timeline_file import PhaseMark, expected_of, scenario_phases, write_timeline
from tests.tui.recorded import NOW, STATE, Recorded
from tui.app import DoctorApp
from tui.frame import frame
from tui.model import parse_state
from tui.timeline import read_timeline, timeline_text

PHASES = [PhaseMark("baseline", 0.0, "healthy traffic"), PhaseMark("incident", 90.0, "+0.5 QPS of long prompts")]


def _write(path: Path, started_at: float, phases: list[PhaseMark] = PHASES) -> Path:
    write_timeline(path, name="long_prompt_storm", description="a storm", started_at=started_at, phases=phases,
                   end_s=330.0, expected="p99_spike on cold -> length_limit")
    return path


def test_the_line_says_the_phase_and_what_comes_next(tmp_path: Path) -> None:
    tl = read_timeline(_write(tmp_path / "t.json", NOW - 30))
    assert tl is not None
    no_fix = parse_state({**STATE, "actions": {}})
    line = timeline_text(tl, no_fix, NOW).plain
    assert line.startswith("long_prompt_storm t=30s") and " baseline 0s " in line and "incident in 60s" in line
    line = timeline_text(tl, no_fix, NOW + 70).plain
    assert " incident 90s " in line and "fix ?" in line and "expect p99_spike" in line


def test_the_fix_is_the_first_action_applied_after_the_incident(tmp_path: Path) -> None:
    # the recorded state's verified length limit was applied at NOW-600: after an incident at NOW-640 ...
    tl = read_timeline(_write(tmp_path / "t.json", NOW - 700, [PhaseMark("baseline", 0.0), PhaseMark("incident", 60)]))
    assert tl is not None
    line = timeline_text(tl, parse_state(STATE), NOW).plain
    assert " fix 100s " in line and "length_limit on router" in line
    # ... but not after one at NOW-10 (that limit is an older one)
    tl = read_timeline(_write(tmp_path / "t.json", NOW - 100))
    assert tl is not None
    assert "fix ?" in timeline_text(tl, parse_state(STATE), NOW).plain


def test_missing_or_bad_files_show_nothing(tmp_path: Path) -> None:
    assert read_timeline(tmp_path / "none.json") is None
    for text in ("{not json", "[]", '{"started_at": "x", "phases": []}', '{"started_at": 1, "phases": [{}]}'):
        (tmp_path / "bad.json").write_text(text)
        assert read_timeline(tmp_path / "bad.json") is None, text


def test_a_scenario_s_own_file_reads_back(tmp_path: Path) -> None:
    sc = SCENARIOS["engine_hang"].with_baseline(90)
    write_timeline(tmp_path / "t.json", name=sc.name, description=sc.description, started_at=NOW,
                   phases=scenario_phases(sc), end_s=sc.duration_s, expected=expected_of(sc))
    tl = read_timeline(tmp_path / "t.json")
    assert tl is not None and tl.scenario == "engine_hang" and tl.incident_at() == NOW + 90
    assert [(p.name, p.at_s) for p in tl.phases] == [("baseline", 0.0), ("incident", 90.0)]
    assert tl.phases[1].note == "fault hang" and tl.expected == "engine_stalled on hot -> relaunch"


def _fleet_text(app: DoctorApp) -> str:
    content = app.screen.query_one("#timeline", Static).content
    return content.plain if isinstance(content, Text) else str(content)


def test_the_fleet_screen_shows_the_timeline_once_the_file_is_there(tmp_path: Path) -> None:
    path = tmp_path / "timeline.json"
    clock = [NOW]
    app = DoctorApp(Recorded(copy.deepcopy({**STATE, "actions": {}})), refresh_s=3600, clock=lambda: clock[0],
                    timeline=path)

    async def run() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            timeline = app.screen.query_one("#timeline", Static)
            assert timeline.has_class("hidden")  # the scenario has not started: nothing to show
            _write(path, NOW - 30)
            app.refresh_now()
            await settle(pilot)
            assert not timeline.has_class("hidden")
            assert "baseline 0s" in _fleet_text(app) and "incident in 60s" in _fleet_text(app)
            clock[0] = NOW + 70
            app.refresh_now()
            await settle(pilot)
            assert "expect p99_spike" in _fleet_text(app)

    asyncio.run(run())


def test_without_a_timeline_the_fleet_screen_has_no_line() -> None:
    app = DoctorApp(Recorded(), refresh_s=3600, clock=lambda: NOW)

    async def run() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            assert app.screen.query_one("#timeline", Static).has_class("hidden")

    asyncio.run(run())


def test_once_prints_the_timeline_line(tmp_path: Path) -> None:
    tl = read_timeline(_write(tmp_path / "t.json", NOW - 30))
    text = frame(parse_state(STATE), source="recorded", now=NOW, width=100, timeline=tl)
    assert "long_prompt_storm t=30s" in text.splitlines()[1]
    assert "long_prompt_storm" not in frame(parse_state(STATE), source="recorded", now=NOW, width=100)


async def settle(pilot: Pilot[None]) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
