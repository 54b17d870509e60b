"""SignalHistory parses each line of its file once, not once per series or baseline a playbook asks for, and still
sees what another process (cron beside the daemon) appended, reading only the new lines."""

from __future__ import annotations

from pathlib import Path

import pytest

import collectors.jsonlines as lines_module
from collectors.history import SignalHistory


def test_reads_are_served_from_the_last_parse_until_the_file_changes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "history.jsonl"
    clock = [1000.0]
    writer, reader = SignalHistory(path, clock=lambda: clock[0]), SignalHistory(path, clock=lambda: clock[0])
    writer.append_many(990.0, {"hot": {"waiting": 3.0}, "cold": {"waiting": 1.0}})
    parses = []
    real = lines_module.json.loads
    monkeypatch.setattr(lines_module.json, "loads", lambda raw: parses.append(1) or real(raw))
    for _ in range(20):
        assert reader.series("hot", "waiting", 60.0) == [(990.0, 3.0)]
        reader.baseline("cold", "waiting", 60.0)
    assert len(parses) == 2  # two lines, each parsed once
    writer.append("hot", 995.0, {"waiting": 5.0})  # another process appends a line
    assert reader.series("hot", "waiting", 60.0) == [(990.0, 3.0), (995.0, 5.0)]
    assert len(parses) == 3  # only the new line
    writer.series("hot", "waiting", 60.0)  # the writer knows what it wrote
    assert len(parses) == 3


def test_append_many_is_one_rewrite(tmp_path: Path) -> None:
    h = SignalHistory(tmp_path / "history.jsonl", clock=lambda: 1000.0)
    h.append_many(999.0, {"a": {"x": 1.0, "y": None, "z": float("nan")}, "b": {"x": 2.0}})
    assert h.series("a", "x", 10) == [(999.0, 1.0)] and h.series("b", "x", 10) == [(999.0, 2.0)]
    assert h.series("a", "y", 10) == [] and h.series("a", "z", 10) == []


def test_the_older_one_document_history_is_taken_over_once(tmp_path: Path) -> None:
    import json

    (tmp_path / "history.json").write_text(json.dumps({"version": 1, "engines": {"hot": [[990.0, {"qps": 2.0}]]}}))
    h = SignalHistory(tmp_path / "history.jsonl", clock=lambda: 1000.0)
    assert h.series("hot", "qps", 60.0) == [(990.0, 2.0)]
    assert (tmp_path / "history.json.migrated").exists() and not (tmp_path / "history.json").exists()
    h.append("hot", 995.0, {"qps": 3.0})
    assert SignalHistory(tmp_path / "history.jsonl", clock=lambda: 1000.0).series("hot", "qps", 60.0) == \
        [(990.0, 2.0), (995.0, 3.0)]


def test_history_is_rewritten_only_when_it_holds_twice_what_it_keeps(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    clock = [0.0]
    h = SignalHistory(path, max_entries_per_engine=10, clock=lambda: clock[0])
    for t in range(200):
        clock[0] = float(t)
        h.append_many(float(t), {"hot": {"qps": float(t)}, "cold": {"qps": 1.0}})
        assert len(path.read_text().splitlines()) <= 2 * 20 + 64 + 2
    assert [v for _, v in h.series("hot", "qps", 1000.0)] == [float(t) for t in range(190, 200)]


def test_the_kept_grouping_agrees_with_a_fresh_read_of_the_file(tmp_path: Path) -> None:
    """Rows appended since the last read are grouped on top of the last grouping: with two writers, rows out of
    order (another process's clock), pruning by age and count and the compaction, a long-lived history answers
    what a history opened on the file now answers; a frozen view answers as the history did when it was made."""
    import random

    path = tmp_path / "history.jsonl"
    rng = random.Random(3)
    now = [1000.0]
    mine, other = (SignalHistory(path, max_entries_per_engine=20, max_age_s=60.0, clock=lambda: now[0])
                   for _ in range(2))
    for _ in range(400):
        now[0] += 0.5
        t = now[0] - (rng.random() * 5 if rng.random() < 0.2 else 0.0)
        rng.choice([mine, other]).append_many(t, {e: {"qps": rng.random()} for e in rng.sample(["hot", "cold"], 1)})
        fresh = SignalHistory(path, max_entries_per_engine=20, max_age_s=60.0, clock=lambda: now[0])
        for engine in ("hot", "cold"):
            assert mine.series(engine, "qps", 30.0) == fresh.series(engine, "qps", 30.0)
            assert mine.baseline(engine, "qps", 60.0, 5.0) == fresh.baseline(engine, "qps", 60.0, 5.0)
    frozen = mine.frozen()
    before = frozen.series("hot", "qps", 30.0)
    other.append_many(now[0], {"hot": {"qps": 42.0}})
    assert frozen.series("hot", "qps", 30.0) == before and mine.series("hot", "qps", 30.0)[-1][1] == 42.0
