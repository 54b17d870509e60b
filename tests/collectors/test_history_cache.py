"""SignalHistory parses its file once per change, not once per series or baseline a playbook asks for, and still
sees what another process (cron beside the daemon) wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

import collectors.history as history_module
from collectors.history import SignalHistory


def test_reads_are_served_from_the_last_parse_until_the_file_changes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "history.json"
    clock = [1000.0]
    writer, reader = SignalHistory(path, clock=lambda: clock[0]), SignalHistory(path, clock=lambda: clock[0])
    writer.append_many(990.0, {"hot": {"waiting": 3.0}, "cold": {"waiting": 1.0}})
    parses = []
    real = history_module.json.loads
    monkeypatch.setattr(history_module.json, "loads", lambda raw: parses.append(1) or real(raw))
    for _ in range(20):
        assert reader.series("hot", "waiting", 60.0) == [(990.0, 3.0)]
        reader.baseline("cold", "waiting", 60.0)
    assert len(parses) == 1
    writer.append("hot", 995.0, {"waiting": 5.0})  # another process rewrites the file
    assert reader.series("hot", "waiting", 60.0) == [(990.0, 3.0), (995.0, 5.0)]
    assert len(parses) == 2
    writer.series("hot", "waiting", 60.0)  # the writer knows what it wrote
    assert len(parses) == 2


def test_append_many_is_one_rewrite(tmp_path: Path) -> None:
    h = SignalHistory(tmp_path / "history.json", clock=lambda: 1000.0)
    h.append_many(999.0, {"a": {"x": 1.0, "y": None, "z": float("nan")}, "b": {"x": 2.0}})
    assert h.series("a", "x", 10) == [(999.0, 1.0)] and h.series("b", "x", 10) == [(999.0, 2.0)]
    assert h.series("a", "y", 10) == [] and h.series("a", "z", 10) == []
