"""The screens and keys on a recorded state (no network): every screen shows what it should at 80x24; help,
pause, refresh rate, back and quit; a slow daemon (one that never answers) never blocks the keys."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest
from rich.text import Text
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Static

from tests.tui.recorded import NOW, Recorded
from tui.app import DoctorApp
from tui.screens.actions import ActionsScreen
from tui.screens.dialogs import HelpScreen
from tui.screens.engine import EngineScreen
from tui.screens.findings import FindingsScreen
from tui.screens.fleet import FleetScreen
from tui.source import DaemonSource
from tui.widgets.heatmap_view import HeatmapView


def drive(app: DoctorApp, scenario: Callable[[Pilot[None]], Awaitable[None]], size: tuple[int, int] = (80, 24)) -> None:
    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            await scenario(pilot)

    asyncio.run(run())


def recorded_app(**kw: object) -> DoctorApp:
    return DoctorApp(Recorded(), refresh_s=3600, clock=lambda: NOW, **kw)  # type: ignore[arg-type]


def text_of(app: DoctorApp, selector: str) -> str:
    """What a Static shows, as plain text."""
    content = app.screen.query_one(selector, Static).content
    return content.plain if isinstance(content, Text) else str(content)


def test_fleet_findings_actions_and_engine_screens_at_80x24() -> None:
    app = recorded_app()

    async def scenario(pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, FleetScreen)
        assert "LIMIT 8192 tok" in text_of(app, "#policy")
        assert "findings: 1 active" in text_of(app, "#summary")
        assert "recorded state" in text_of(app, "#status") and "read-only" in text_of(app, "#status")
        table = app.screen.query_one("DataTable")
        assert [str(k.value) for k in table.rows] == ["hot", "cold"]  # type: ignore[attr-defined]
        assert table.get_row("hot")[10].plain == "82%!"  # type: ignore[attr-defined]
        await pilot.press("2")
        assert isinstance(app.screen, FindingsScreen)
        detail = text_of(app, "#detail")
        assert "because long_prompt_share = 0.52 (> 0.05 over 20s)" in detail
        assert "1. length_limit on router(max_prompt_tokens=8192, expires_s=3600)" in detail
        assert "action run-pending0001: pending" in detail
        await pilot.press("down")
        assert "held 40s of its 300s, fires in 260s" in text_of(app, "#detail")
        await pilot.press("3")
        assert isinstance(app.screen, ActionsScreen)
        assert "run-pending0001: length_limit on router  status pending" in text_of(app, "#detail")
        await pilot.press("down")
        assert "undo: length_limit on router" in text_of(app, "#detail")
        await pilot.press("1")
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("enter")
        assert isinstance(app.screen, EngineScreen)
        await pilot.pause()
        grid = app.screen.query_one(HeatmapView).current()
        assert grid is not None and grid.peak > 0
        assert "prompt_too_long" in text_of(app, "#events")
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)

    drive(app, scenario)


def test_help_pause_refresh_rate_and_quit() -> None:
    app = recorded_app()

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
        reads = app.reads
        await pilot.press("p")
        assert app.paused and "PAUSED" in text_of(app, "#status")
        app.tick()  # a tick while paused reads nothing
        await app.workers.wait_for_complete()
        assert app.reads == reads
        await pilot.press("p")
        assert not app.paused
        app.refresh_s = 1.0
        await pilot.press("plus")
        assert app.refresh_s == 0.5
        await pilot.press("minus", "minus")
        assert app.refresh_s == 2.0 and "every 2s" in text_of(app, "#status")
        await pilot.press("q")

    drive(app, scenario)
    assert app.return_code == 0


def test_a_daemon_that_never_answers_blocks_nothing() -> None:
    with socket.socket() as quiet:  # accepts connections (the backlog) and never answers
        quiet.bind(("127.0.0.1", 0))
        quiet.listen(8)
        port = quiet.getsockname()[1]
        app = DoctorApp(DaemonSource(f"http://127.0.0.1:{port}", None, timeout_s=60), refresh_s=0.05, listen=False)

        async def scenario(pilot: Pilot[None]) -> None:
            deadline = time.monotonic() + 30
            while app.skipped < 3 and time.monotonic() < deadline:
                await pilot.pause(0.1)
            assert app.skipped >= 3 and app.reads == 0  # ticks skipped while the one read waits
            await pilot.press("2")
            assert isinstance(app.screen, FindingsScreen)  # the keys still work
            await pilot.press("1")
            assert isinstance(app.screen, FleetScreen) and "reading" in text_of(app, "#status")

        async def run() -> None:
            async with app.run_test(size=(80, 24)) as pilot:
                await scenario(pilot)
                app.workers.cancel_all()

        asyncio.run(run())


def test_the_command_palette_jumps_to_an_engine_a_playbook_and_an_action() -> None:
    app = recorded_app()

    async def pick(pilot: Pilot[None], query: str) -> None:
        await pilot.press("ctrl+p")
        await pilot.press(*query)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the palette searches in the background
            await pilot.pause(0.1)
            lists = app.screen.query(CommandList)
            if lists and lists.first().option_count:
                break
        await pilot.pause(0.2)
        await pilot.press("enter")
        await pilot.pause()

    async def scenario(pilot: Pilot[None]) -> None:
        await pick(pilot, "cold")
        assert isinstance(app.screen, EngineScreen) and app.screen.engine == "cold"
        await pick(pilot, "verif")
        assert isinstance(app.screen, ActionsScreen)
        assert app.screen.selected_key() == "run-verified001"
        await pick(pilot, "playbook kv")
        assert isinstance(app.screen, FindingsScreen)
        table = app.screen.query_one("DataTable")
        assert len(table.rows) == 1 and app.screen.selected_key() == "fnd-fedcba9876543210"  # type: ignore[attr-defined]

    drive(app, scenario, size=(120, 40))


def test_no_color_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = recorded_app()

    async def scenario(pilot: Pilot[None]) -> None:
        assert app.no_color
        table = app.screen.query_one("DataTable")
        assert table.get_row("hot")[10].plain == "82%!" and table.get_row("hot")[3].plain == "ok"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        drawn = app.screen.query_one(HeatmapView).render().plain
        assert "9" in drawn and "5" in drawn and any(ch in drawn for ch in "░▒▓█")  # shades and marks, not colour

    drive(app, scenario)


def test_the_status_bar_marks_a_standby_replica() -> None:
    from tests.tui.recorded import STATE

    doc = {**STATE, "leader": {"role": "standby", "store": "etcd", "why": "the lease is held by b"}}
    app = DoctorApp(Recorded(doc), refresh_s=3600, clock=lambda: NOW)

    async def scenario(pilot: Pilot[None]) -> None:
        assert "STANDBY" in text_of(app, "#status")

    drive(app, scenario)
    plain = recorded_app()

    async def alone(pilot: Pilot[None]) -> None:
        assert "STANDBY" not in text_of(plain, "#status") and "leader" not in text_of(plain, "#status")

    drive(plain, alone)
