"""Chaos tests: each records the outcome it asserted (recovered / refused with the reason / reported), and how
much was lost (must be none), for docs/reliability.md. Tests marked `reliability` take minutes: they run only
under `make reliability` (SERVING_DOCTOR_RELIABILITY=1), never in `make test`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from tests.chaos.record import KEY

Record = Callable[..., None]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reliability: a chaos case that needs minutes (make reliability only)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SERVING_DOCTOR_RELIABILITY") == "1":
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if item.get_closest_marker("reliability") and "tests/chaos/" in item.nodeid else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def outcome(request: pytest.FixtureRequest) -> Record:
    """`outcome("recovered" | "refused" | "reported", "what happened", lost=0)`, after the test's asserts."""

    def record(kind: str, detail: str, *, lost: int = 0, **extra: Any) -> None:
        assert kind in ("recovered", "refused", "reported"), kind
        request.node.user_properties.append((KEY, {"kind": kind, "detail": detail, "lost": lost, **extra}))

    return record
