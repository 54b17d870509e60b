"""A pytest plugin (`-p tests.chaos.record --reliability-json PATH`) that writes what the reliability account is
rendered from: each test's result and seconds, the outcome a chaos test recorded (tests/chaos/conftest.py's
`outcome` fixture), and the account's rows (tests/chaos/cases.py). Works under xdist: outcomes travel as the
reports' user_properties."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

KEY = "reliability_outcome"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reliability-json", metavar="PATH", help="write the reliability account's results here")


class Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tests: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = self.tests.setdefault(report.nodeid, {"result": "passed", "seconds": 0.0})
        row["seconds"] = round(row["seconds"] + report.duration, 2)
        if report.failed:
            row["result"] = "failed" if report.when == "call" else "error"
        elif report.skipped and row["result"] == "passed":
            row["result"] = "skipped"
        for name, value in report.user_properties:
            if name == KEY:
                row["outcome"] = value

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from tests.chaos.cases import registry

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"tests": self.tests, **registry()}, indent=1, sort_keys=True) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--reliability-json")
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist) writes it
        config.pluginmanager.register(Recorder(Path(path)), "reliability-recorder")
