"""SVG snapshots of each screen on the recorded state at 80x24 (pytest-textual-snapshot). After a deliberate change
of the screens, look at snapshot_report.html, then accept with `pytest tests/tui --snapshot-update`."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from sim.timeline_file import PhaseMark, write_timeline
from tests.tui.recorded import NOW, STATE, Recorded
from tui.app import DoctorApp
from tui.decision import Frozen
from tui.model import parse_state
from tui.screens.dialogs import ConfirmDecision

SIZE = (80, 24)


def app() -> DoctorApp:
    a = DoctorApp(Recorded(), refresh_s=3600, clock=lambda: NOW)
    a.theme = "textual-dark"
    return a


async def settled(pilot: Pilot[None]) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def keys(*pressed: str) -> Callable[[Pilot[None]], Any]:
    async def run(pilot: Pilot[None]) -> None:
        await settled(pilot)
        await pilot.press(*pressed)
        await settled(pilot)

    return run


def test_fleet(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=SIZE, run_before=settled)


def test_fleet_light_theme(snap_compare: Any) -> None:
    a = app()
    a.theme = "textual-light"
    assert snap_compare(a, terminal_size=SIZE, run_before=settled)


def test_fleet_with_the_scenario_timeline(snap_compare: Any, tmp_path: Path) -> None:
    path = tmp_path / "timeline.json"
    write_timeline(path, name="long_prompt_storm", description="", started_at=NOW - 130, end_s=330.0,
                   phases=[PhaseMark("baseline", 0.0), PhaseMark("incident", 90.0)],
                   expected="p99_spike on cold -> length_limit")
    a = DoctorApp(Recorded(), refresh_s=3600, clock=lambda: NOW, timeline=path)
    a.theme = "textual-dark"
    assert snap_compare(a, terminal_size=SIZE, run_before=settled)


def test_findings(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=SIZE, run_before=keys("2"))


def test_actions(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=SIZE, run_before=keys("3"))


def test_engine_with_heatmap(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=SIZE, run_before=keys("enter"))


def test_help(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=SIZE, run_before=keys("question_mark"))


def test_confirmation_dialog(snap_compare: Any) -> None:
    async def run(pilot: Pilot[None]) -> None:
        await settled(pilot)
        state = parse_state(await Recorded().state())
        pilot.app.push_screen(ConfirmDecision(Frozen("approve", state.actions[0], state.findings[0], NOW)))
        await settled(pilot)

    assert snap_compare(app(), terminal_size=SIZE, run_before=run)


def test_logs(snap_compare: Any, tmp_path: Path) -> None:
    log = tmp_path / "hot.log"
    log.write_text("".join(f"INFO 12-01 14:39:{i:02d} engine step {i}\n" for i in range(30))
                   + "ERROR 12-01 14:39:59 This model's maximum context length is 32768 tokens\n")
    doc = copy.deepcopy(STATE)
    doc["engines"][0]["log"] = str(log)
    a = DoctorApp(Recorded(doc), refresh_s=3600, clock=lambda: NOW)
    a.theme = "textual-dark"
    assert snap_compare(a, terminal_size=SIZE, run_before=keys("enter", "l"))
