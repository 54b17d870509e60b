"""`doctor tui` attached to a real `doctor serve` (approve mode) over sim engines behind the real router, with half
the requests 9000-token documents through the router: the finding appears, and reject, approve and roll back go
through the daemon's API and change what the next frame shows. The engine screen draws the heatmap from the
daemon's histograms; `--once` prints a frame; a daemon restart is seen and said. One deployment for the session
(tests/tui/conftest.py)."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Static

from tests.serve.stack import API_TOKEN, audit, policy
from tests.tui.deployment import Deployment
from tui.app import DoctorApp
from tui.cli import main
from tui.model import ActionRow
from tui.screens.actions import ActionsScreen
from tui.screens.dialogs import ConfirmDecision
from tui.screens.engine import EngineScreen
from tui.screens.findings import FindingsScreen
from tui.screens.fleet import FleetScreen
from tui.source import DaemonSource, SourceError
from tui.widgets.heatmap_view import HeatmapView

pytestmark = pytest.mark.timeout(300)
T = TypeVar("T")


def app_for(d: Deployment, **kw: Any) -> DoctorApp:
    return DoctorApp(DaemonSource(d.daemon.url, API_TOKEN), refresh_s=0.5, who="tester", **kw)


def drive(app: DoctorApp, scenario: Callable[[Pilot[None]], Awaitable[None]],
          size: tuple[int, int] = (120, 40)) -> None:
    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await scenario(pilot)

    asyncio.run(run())


async def until(pilot: Pilot[None], what: str, probe: Callable[[], T | None], timeout_s: float = 90.0) -> T:
    """Let the app run until `probe` gives something truthy (a deadline, never a guess at this machine's speed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        await pilot.pause(0.2)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")


def record(app: DoctorApp, rid: str) -> ActionRow | None:
    return next((a for a in app.state.actions if a.id == rid), None) if app.state else None


def pending(app: DoctorApp) -> ActionRow | None:
    return next((a for a in app.state.actions if a.status == "pending" and a.kind == "length_limit"), None) \
        if app.state else None


def select(app: DoctorApp, key: str) -> None:
    table = app.screen.query_one("DataTable")
    keys = [str(k.value) for k in table.rows]  # type: ignore[attr-defined]
    table.move_cursor(row=keys.index(key))  # type: ignore[attr-defined]


def text_of(app: DoctorApp, selector: str) -> str:
    content = app.screen.query_one(selector, Static).content
    return content.plain if isinstance(content, Text) else str(content)


def dialog_text(app: DoctorApp) -> str:
    assert isinstance(app.screen, ConfirmDecision), app.screen
    return "\n".join(app.screen.frozen.lines())


def test_the_fleet_then_reject_approve_and_roll_back_through_the_daemon(d: Deployment) -> None:
    app = app_for(d)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, "both engines on the fleet screen",
                    lambda: app.state and {e.name for e in app.state.engines} == {"hot", "cold"})
        assert isinstance(app.screen, FleetScreen)
        assert "route>16384 tok" in text_of(app, "#policy")
        first = await until(pilot, "the length limit waiting for approval", lambda: pending(app))
        await pilot.press("2")
        assert isinstance(app.screen, FindingsScreen)
        await until(pilot, "the finding listed", lambda: first.finding_id in [
            str(k.value) for k in app.screen.query_one("DataTable").rows])  # type: ignore[attr-defined]
        select(app, first.finding_id)
        await pilot.pause()
        # cancel: nothing changes
        await pilot.press("a")
        assert "length_limit on router(" in dialog_text(app)
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmDecision) and "cancelled; nothing changed" in app.said[-1]
        # reject: the next frame shows it refused, and a person's name is in the audit log
        await pilot.press("r")
        assert "Nothing changes on the fleet" in dialog_text(app)
        await pilot.press("y")
        await until(pilot, "the rejection on screen",
                    lambda: (rec := record(app, first.id)) and rec.status == "refused")
        assert any(e["event"] == "rejected" and "person:tester" in str(e.get("who")) for e in audit(d.state))
        assert policy(d.router_url)["length_limit_tokens"] is None
        # the next cycle asks again; approve: the limit goes in, and the next frame shows the action applied
        again = await until(pilot, "the doctor asking again", lambda: (p := pending(app)) and p.id != first.id and p)
        select(app, again.finding_id)
        await pilot.pause()
        await pilot.press("a")
        assert "This will apply now" in dialog_text(app)
        await pilot.press("y")
        await until(pilot, "the approval applied on screen",
                    lambda: (rec := record(app, again.id)) and rec.status in ("applied", "verified"))
        assert policy(d.router_url)["length_limit_tokens"] == 8192
        await until(pilot, "the policy line showing the limit",
                    lambda: app.state and app.state.policy and app.state.policy.get("length_limit_tokens") == 8192)
        # roll back from the actions screen
        await pilot.press("3")
        assert isinstance(app.screen, ActionsScreen)
        select(app, again.id)
        await pilot.pause()
        await pilot.press("b")
        assert "This will apply the inverse now" in dialog_text(app)
        await pilot.press("y")
        await until(pilot, "the rollback on screen",
                    lambda: (rec := record(app, again.id)) and rec.status == "rolled_back")
        assert policy(d.router_url)["length_limit_tokens"] is None

    drive(app, scenario)


def test_the_engine_screen_draws_the_heatmap_from_the_daemons_histograms(d: Deployment) -> None:
    app = app_for(d)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, "the fleet", lambda: app.state and app.state.engines)
        select(app, "hot")
        await pilot.press("enter")
        assert isinstance(app.screen, EngineScreen) and app.screen.engine == "hot"
        view = app.screen.query_one(HeatmapView)
        grid = await until(pilot, "a heatmap with requests in it", lambda: (g := view.current()) and g.peak > 0 and g)
        assert grid.bounds[-1] == float("inf")  # the scrape's own bounds
        assert "time to first token heatmap" in view.render().plain
        await pilot.press("e")
        assert "end-to-end latency heatmap" in view.render().plain
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
        # `/` filters the fleet as you type; Esc clears it
        await pilot.press("slash", "c", "o", "l", "d")
        table = app.screen.query_one("DataTable")
        assert [str(k.value) for k in table.rows] == ["cold"]  # type: ignore[attr-defined]
        await pilot.press("escape")
        assert sorted(str(k.value) for k in table.rows) == ["cold", "hot"]  # type: ignore[attr-defined]

    drive(app, scenario, size=(80, 24))


def test_read_only_has_no_key_that_changes_anything(d: Deployment) -> None:
    app = app_for(d, read_only=True)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, "a pending action", lambda: pending(app))
        await pilot.press("2")
        await pilot.pause()
        assert app.screen.check_action("decide", ("approve",)) is False
        for key in ("a", "r", "b"):
            await pilot.press(key)
            assert not isinstance(app.screen, ConfirmDecision)
        assert "read-only" in app.status_text().plain

    drive(app, scenario)


def test_once_prints_a_frame_and_a_wrong_token_is_a_message(d: Deployment) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--daemon", d.daemon.url, "--token-file", str(d.tmp / "api-token"), "--once", "--width", "150"],
                out=out, err=err)
    assert code == 0, err.getvalue()
    text = out.getvalue()
    assert f"daemon {d.daemon.url}" in text and "route>16384" in text
    assert any(line.startswith("hot ") for line in text.splitlines())
    # reads are open on this daemon (no read_token_file); a decision with a wrong token is refused, and says why
    source = DaemonSource(d.daemon.url, "wrong-token")

    async def decide() -> str:
        try:
            await source.decide("approve", "run-nothing", "person:tester")
        except SourceError as exc:
            return str(exc)
        finally:
            await source.aclose()
        return "accepted"

    said = asyncio.run(decide())
    assert "HTTP 401" in said and "--token-file" in said


def test_a_daemon_restart_is_seen_said_and_survived(d: Deployment) -> None:
    app = app_for(d)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, "the fleet", lambda: app.state and app.state.cycles)
        await asyncio.to_thread(d.daemon.stop)
        await until(pilot, "the daemon seen gone", lambda: "UNREACHABLE" in app.status_text().plain)
        assert app.state is not None  # the last state stays on screen
        await asyncio.to_thread(d.daemon.start)
        await until(pilot, "the reconnection said", lambda: any("reconnected after" in m for m in app.said))
        assert app.problem is None and "UNREACHABLE" not in app.status_text().plain
        assert any("the daemon restarted" in m for m in app.said)

    drive(app, scenario)
