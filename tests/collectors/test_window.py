"""The bounded signal history in the state directory (the window rules are in test_window_rules.py)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from collectors.history import SignalHistory


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_history_series_and_baseline(tmp_path: Path) -> None:
    clock = Clock(10_000.0)
    h = SignalHistory(tmp_path / "state" / "signals.json", max_entries_per_engine=50, max_age_s=3600, clock=clock)
    for i in range(60):
        clock.t = 10_000.0 + 60 * i
        h.append("hot", clock.t, {"p99_ttft_s": float(i), "qps": None, "kv_cache_usage": 0.5})
    assert h.engines() == ["hot"]
    series = h.series("hot", "p99_ttft_s", since_s=300)
    assert [v for _, v in series] == [54.0, 55.0, 56.0, 57.0, 58.0, 59.0]  # t >= now - 300
    assert h.series("hot", "qps", since_s=3600) == []  # None is not stored
    # t in [now - 1800, now - 600): entries 29..48, median 38.5
    assert h.baseline("hot", "p99_ttft_s", window_s=1800, exclude_recent_s=600) == pytest.approx(38.5)
    assert h.baseline("cold", "p99_ttft_s", window_s=1800) is None
    assert len(h.series("hot", "p99_ttft_s", since_s=1e9)) == 50  # bounded
    assert len(SignalHistory(h.path, max_entries_per_engine=50, max_age_s=3600, clock=clock).series(
        "hot", "kv_cache_usage", since_s=1e9)) == 50
    clock.t += 7200  # everything ages out at the next write
    h.append("cold", clock.t, {"qps": 1.0})
    assert h.engines() == ["cold"]


def test_corrupt_history_lines_are_skipped_and_a_torn_one_kept_aside(tmp_path: Path) -> None:
    path = tmp_path / "signals.jsonl"
    path.write_text('[50, "hot", {"qps": 1.0}]\n{"version": 1, "engines": {}}\n[60, "hot", {"qps": ')
    h = SignalHistory(path, clock=Clock(100.0))
    assert h.series("hot", "qps", 1000) == [(50.0, 1.0)]
    assert h.problems == [f"{path}: skipped 1 unreadable line(s)",
                          f"{path}: its last line is incomplete (20 bytes): ignored"]
    h.append("hot", 100.0, {"qps": 2.0})
    assert h.series("hot", "qps", 1000) == [(50.0, 1.0), (100.0, 2.0)]
    assert (tmp_path / "signals.jsonl.corrupt").read_text() == '[60, "hot", {"qps": \n'  # nothing lost
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert SignalHistory(path, clock=Clock(100.0)).baseline("hot", "qps", 1000) is None
    assert not list(tmp_path.glob("*.tmp"))


def _writer(path: str, engine: str) -> None:
    h = SignalHistory(Path(path), max_entries_per_engine=1000, clock=lambda: 1000.0)
    for i in range(25):
        h.append(engine, 900.0 + i, {"qps": float(i)})


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "signals.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), f"e{k}")) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    h = SignalHistory(path, max_entries_per_engine=1000, clock=lambda: 1000.0)
    assert h.engines() == ["e0", "e1", "e2"]
    assert all(len(h.series(e, "qps", 1000)) == 25 for e in h.engines())
