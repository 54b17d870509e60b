"""`doctor tui`'s command line: mistakes are one clear message and exit 3, never a traceback; standalone mode runs
the doctor's own cycle over the config's engines (observe-only) and shows them."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

from doctor.cli import main as doctor_main
from tests.serve.stack import write_config
from tests.tui.deployment import Deployment
from tui.app import DoctorApp
from tui.cli import main
from tui.local import LocalSource, local_plan


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_mistakes_are_a_message_and_exit_3(tmp_path: Path) -> None:
    code, _, err = run(["--once"])
    assert code == 3 and "name the daemon with --daemon URL, or engines with --config or --engine" in err
    code, _, err = run(["--daemon", "http://127.0.0.1:9", "--token-file", str(tmp_path / "nope"), "--once"])
    assert code == 3 and f"cannot read the token file {tmp_path / 'nope'}" in err
    code, _, err = run(["--engine", "hot=http://127.0.0.1:9", "--refresh", "0s", "--once"])
    assert code == 3 and "--refresh must be > 0" in err
    code, _, err = run(["--engine", "nonsense", "--once"])
    assert code == 3 and "Traceback" not in err and err.startswith("doctor tui:")
    (tmp_path / "bad.toml").write_text("[doctor]\nmode = 'sometimes'\n")
    code, _, err = run(["--config", str(tmp_path / "bad.toml"), "--once"])
    assert code == 3 and "mode" in err
    code, _, err = run(["--daemon", "http://127.0.0.1:9", "--once"])  # nothing listens there
    assert code == 3 and "cannot reach the daemon at http://127.0.0.1:9" in err
    code, _, err = run(["--engine", "hot=http://127.0.0.1:9", "--theme", "nope"])
    assert code == 3 and "--theme 'nope': expected one of" in err and "textual-light" in err
    code, _, err = run(["--engine", "hot=http://127.0.0.1:9"])  # no terminal here (pytest's output is captured)
    assert code == 3 and "no terminal here; use --once" in err
    assert doctor_main(["tui", "--daemon", "http://127.0.0.1:9", "--engine", "hot=http://x"]) == 3


def test_standalone_runs_the_doctors_cycle_over_the_configs_engines(d: Deployment, tmp_path: Path) -> None:
    config = write_config(tmp_path, hot=d.hot, cold=d.cold, router_url=d.router_url, mode="observe")
    code, out, err = run(["--config", str(config), "--once", "--refresh", "0.5s", "--width", "150"])
    assert code == 0, err
    assert "standalone (observe)" in out and "route>16384" in out
    assert any(line.startswith("hot ") for line in out.splitlines())
    assert (tmp_path / "state" / "history.jsonl").exists()  # the cycle recorded what it read, as every cycle does

    from doctor.config import load_config

    cfg = load_config(config)
    app = DoctorApp(LocalSource(cfg, local_plan(cfg, tmp_path / "state", refresh_s=0.5)), refresh_s=0.5)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            deadline = time.monotonic() + 60
            while app.reads < 2 and time.monotonic() < deadline:
                await pilot.pause(0.2)
            assert app.reads >= 2 and app.state is not None
            assert [e.name for e in app.state.engines] == ["hot", "cold"]
            assert app.state.mode == "observe" and not app.read_only
            table = app.screen.query_one("DataTable")
            assert sorted(str(k.value) for k in table.rows) == ["cold", "hot"]  # type: ignore[attr-defined]
            await pilot.press("q")

    asyncio.run(scenario())
