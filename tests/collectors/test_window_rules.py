"""The window rules: which snapshot opens a window, counter resets and histogram layout changes inside it,
gauges judged over its reads, too few requests to judge, and the snapshot store that carries them across runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from collectors.combine import EngineReading, build_signals
from collectors.snapstore import SnapshotStore
from collectors.types import EngineConfigView, HistogramData, MetricsSnapshot, Sample
from collectors.window import choose_base, pinned_cap, window_chain, window_view

BOUNDS = (1.0, 2.0, 5.0, math.inf)
WIDE = (0.5, 1.0, 2.5, 5.0, 10.0, math.inf)


def snap(t: float, *, finished: float = 0.0, ttft: tuple[float, ...] = (0, 0, 0, 0), bounds: tuple[float, ...] = BOUNDS,
         running: float = 0.0, waiting: float = 0.0, kv: float = 0.0, preempt: float = 0.0,
         prompts: tuple[float, ...] | None = None) -> MetricsSnapshot:
    hists = {"ttft": HistogramData(bounds, ttft, sum(ttft) * 0.1, ttft[-1] if ttft else 0.0)}
    if prompts is not None:
        hists["prompt_len"] = HistogramData((1024.0, 4096.0, 8192.0, math.inf), prompts, prompts[-1] * 500,
                                            prompts[-1])
    return MetricsSnapshot(t, {"request_success{stop}": finished, "preemptions": preempt},
                           {"running": running, "waiting": waiting, "kv_cache_usage": kv}, hists, {}, frozenset())


def test_the_snapshot_nearest_the_window_age_opens_it() -> None:
    snaps = [snap(t) for t in (0.0, 20.0, 38.0, 50.0, 65.0, 80.0, 95.0)]
    cur = snap(100.0)
    assert choose_base(snaps, cur, 60.0).timestamp == 38.0  # age 62 is nearer 60 than age 50
    assert choose_base(snaps, cur, 30.0).timestamp == 65.0
    assert choose_base(snaps, cur, 60.0, min_age_s=70.0).timestamp == 20.0  # at least 70 s old
    assert choose_base([snap(0.0)], snap(400.0), 60.0) is None  # older than three windows: cron was stopped
    assert choose_base([], cur, 60.0) is None
    assert choose_base([snap(100.0), snap(120.0)], cur, 60.0) is None  # nothing older than the closing read
    chain = window_chain(snaps, cur, 60.0)
    assert chain is not None and [s.timestamp for s in chain] == [38.0, 50.0, 65.0, 80.0, 95.0, 100.0]


def test_a_counter_reset_inside_the_window_counts_both_sides() -> None:
    chain = [snap(0.0, finished=100.0), snap(15.0, finished=130.0), snap(30.0, finished=4.0),  # restart
             snap(45.0, finished=10.0)]
    view = window_view(chain)
    assert view.cur.counters["request_success{stop}"] - view.base.counters["request_success{stop}"] == 40.0
    assert any("request_success{stop} 130 -> 4" in r for r in view.resets)
    reading = EngineReading("hot", "hot", "http://x")
    signals = build_signals(reading, window_s=60.0, chain=chain)
    assert signals.values["qps"] == pytest.approx(40.0 / 45.0)
    assert "counter reset" in signals.reasons["counter_reset"]
    assert signals.window_s == 45.0


def test_a_histogram_reset_inside_the_window_adds_both_sides() -> None:
    chain = [snap(0.0, ttft=(10, 10, 10, 10)), snap(15.0, ttft=(10, 15, 20, 20)),
             snap(30.0, ttft=(2, 3, 3, 3)), snap(45.0, ttft=(2, 5, 6, 6))]  # restart between 15 and 30
    view = window_view(chain)
    inc = [c - b for c, b in zip(view.cur.histograms["ttft"].cumulative, view.base.histograms["ttft"].cumulative,
                                 strict=True)]
    assert inc == [2.0, 10.0, 16.0, 16.0]  # 10 before the restart, 6 after
    assert any("ttft count 20 -> 3" in r for r in view.resets)


def test_a_bucket_layout_change_counts_only_since_the_restart() -> None:
    chain = [snap(0.0, ttft=(5, 5, 5, 5)), snap(15.0, ttft=(5, 9, 9, 9)),
             snap(30.0, ttft=(1, 2, 2, 2, 3, 3), bounds=WIDE), snap(45.0, ttft=(1, 4, 4, 6, 7, 7), bounds=WIDE)]
    view = window_view(chain)
    cur, base = view.cur.histograms["ttft"], view.base.histograms["ttft"]
    assert base.bounds == cur.bounds == WIDE
    assert [c - b for c, b in zip(cur.cumulative, base.cumulative, strict=True)] == [1, 4, 4, 6, 7, 7]
    assert view.histogram_since["ttft"] == 15.0
    assert any("buckets changed" in r for r in view.resets)


def test_gauges_are_judged_over_every_read_of_the_window() -> None:
    # the real-vLLM case: KV read 0%, 33%, 93%, 0% at the instants sampled while preempting
    chain = [snap(t, kv=kv, preempt=p) for t, kv, p in ((0, 0.0, 0), (15, 0.33, 60), (30, 0.93, 130), (45, 0.0, 200))]
    signals = build_signals(EngineReading("hot", "hot", "http://x"), window_s=60.0, chain=chain)
    v = signals.values
    assert v["kv_cache_usage"] == 0.0  # the newest instant says nothing
    assert v["kv_cache_usage_max"] == 0.93 and v["kv_cache_usage_mean"] == pytest.approx(0.315)
    assert v["preemptions_per_s"] == pytest.approx(200 / 45)
    assert v["gauge_reads"] == 4.0


def test_too_few_requests_are_marked_weak_and_enough_are_not() -> None:
    few = [snap(0.0, ttft=(0, 0, 0, 0), prompts=(0, 0, 0, 0)), snap(5.0, ttft=(1, 2, 3, 3), prompts=(1, 1, 3, 3))]
    signals = build_signals(EngineReading("hot", "hot", "http://x"), window_s=5.0, chain=few)
    assert signals.values["long_prompt_share"] is not None
    assert signals.weak["long_prompt_share"] == 3.0 and signals.is_weak("p99_ttft_s")
    assert "too few to judge" in signals.reasons["long_prompt_share"]
    many = [few[0], snap(60.0, ttft=(10, 20, 30, 30), prompts=(10, 10, 30, 30))]
    signals = build_signals(EngineReading("hot", "hot", "http://x"), window_s=60.0, chain=many)
    assert not signals.weak
    # 5120 lies inside (4096, 8192]: 10 + 20 x 1024/4096 = 15 of 30 prompts below it
    assert signals.values["long_prompt_share"] == pytest.approx(0.5)


def test_a_cap_is_seen_only_when_running_holds_while_requests_wait() -> None:
    pinned = [snap(t, running=8, waiting=w, kv=0.3) for t, w in ((0, 20), (15, 28), (30, 25))]
    signals = build_signals(EngineReading("hot", "hot", "http://x"), window_s=60.0, chain=pinned)
    assert signals.values["seq_cap"] == 8.0 and signals.values["batch_utilization"] == 1.0
    assert signals.reasons["seq_cap"].startswith("observed: running held at 8")
    moving = [snap(t, running=r, waiting=2, kv=0.3) for t, r in ((0, 5), (15, 8), (30, 6))]
    signals = build_signals(EngineReading("hot", "hot", "http://x"), window_s=60.0, chain=moving)
    assert signals.values["seq_cap"] is None and signals.values["batch_utilization"] is None
    assert "max_num_seqs unknown" in signals.reasons["batch_utilization"]
    declared = EngineReading("hot", "hot", "http://x", config=EngineConfigView(max_num_seqs=16))
    signals = build_signals(declared, window_s=60.0, chain=moving)
    assert signals.values["batch_utilization"] == pytest.approx(19 / 3 / 16)
    kv_bound = [snap(t, running=8, waiting=5, kv=0.97) for t in (0, 15, 30)]  # KV, not a cap
    stats = window_view(kv_bound).gauges
    assert pinned_cap(stats, preempting=False) is None
    assert pinned_cap(window_view(pinned).gauges, preempting=True) is None


def test_the_store_keeps_snapshots_across_runs_and_drops_another_engine(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "snapshots.jsonl", max_per_engine=5, max_age_s=100.0)
    store.save("hot", "http://a", [snap(0.0, finished=1.0, ttft=(1, 1, 1, 1)), snap(5.0, finished=2.0)])
    store.save("hot", "http://a", [snap(15.0, finished=3.0), snap(5.0, finished=2.0)])  # a repeat is kept once
    got = store.load("hot", "http://a")
    assert [s.timestamp for s in got] == [0.0, 5.0, 15.0]
    assert got[0].histograms["ttft"].bounds[-1] == math.inf and got[0].counters["request_success{stop}"] == 1.0
    assert store.load("hot", "http://b") == []  # another URL: another engine
    store.save("hot", "http://a", [snap(t) for t in (20.0, 30.0, 40.0, 200.0)])
    assert [s.timestamp for s in store.load("hot", "http://a")] == [200.0]  # pruned by age and count
    store.save("hot", "http://b", [snap(210.0)])
    assert [s.timestamp for s in store.load("hot", "http://b")] == [210.0]
    for line in (tmp_path / "snapshots.jsonl").read_text().splitlines():  # strict JSON, line by line
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert store.load("hot", "http://a") == []  # the engine's URL changed: its earlier snapshots are gone


def test_bad_lines_in_the_store_are_skipped_and_said(tmp_path: Path) -> None:
    path = tmp_path / "snapshots.jsonl"
    store = SnapshotStore(path)
    store.save("hot", "http://a", [snap(1.0)])
    with path.open("a") as f:
        f.write('{not json\n{"v": 2, "e": "hot"}\n')
    store.save("hot", "http://a", [snap(2.0)])
    fresh = SnapshotStore(path)
    assert [s.timestamp for s in fresh.load("hot", "http://a")] == [1.0, 2.0]
    assert fresh.problems == [f"{path}: skipped 2 unreadable line(s)"]


def test_a_torn_last_line_is_dropped_by_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "snapshots.jsonl"
    SnapshotStore(path).save("hot", "http://a", [snap(1.0)])
    with path.open("a") as f:
        f.write('{"v": 2, "e": "hot", "u": "http://a", "s": {"t": 3')  # the writer died mid-line
    store = SnapshotStore(path)
    assert [s.timestamp for s in store.load("hot", "http://a")] == [1.0]
    store.save("hot", "http://a", [snap(2.0)])
    assert [s.timestamp for s in SnapshotStore(path).load("hot", "http://a")] == [1.0, 2.0]
    assert all(line.endswith("}") for line in path.read_text().splitlines())


def test_the_store_is_appended_to_and_rewritten_only_when_it_holds_twice_what_it_keeps(tmp_path: Path) -> None:
    path = tmp_path / "snapshots.jsonl"
    store, other = SnapshotStore(path, max_per_engine=10), SnapshotStore(path, max_per_engine=10)
    inode = path.stat().st_ino if path.exists() else None
    for t in range(60):
        (store if t % 2 else other).save("hot", "http://a", [snap(float(t))])  # two processes taking turns
        assert [s.timestamp for s in store.load("hot", "http://a")] == [float(x) for x in range(max(0, t - 9), t + 1)]
        inode = inode or path.stat().st_ino
    assert len(path.read_text().splitlines()) <= 2 * 10 + 64 + 1
    assert path.stat().st_ino == inode  # 60 lines: not rewritten yet
    for t in range(60, 120):
        store.save("hot", "http://a", [snap(float(t))])
    assert path.stat().st_ino != inode and len(path.read_text().splitlines()) <= 2 * 10 + 64 + 1
    assert [s.timestamp for s in other.load("hot", "http://a")] == [float(x) for x in range(110, 120)]


def test_a_first_run_falls_back_to_its_own_two_reads() -> None:
    reading = EngineReading("hot", "hot", "http://x")
    for t, finished in ((0.0, 0.0), (5.0, 4.0)):
        reading.samples.append(Sample("metrics", "hot", t, metrics=snap(t, finished=finished)))
    signals = build_signals(reading, window_s=5.0)
    assert signals.values["qps"] == pytest.approx(0.8) and signals.window_s == 5.0


def test_the_stores_kept_index_agrees_with_a_fresh_read_of_the_file(tmp_path: Path) -> None:
    """The store's per-engine index follows appends, URL changes and another process's compaction: what a
    long-lived store answers is what a store opened on the file now answers."""
    import random

    path = tmp_path / "snapshots.jsonl"
    rng = random.Random(7)
    store, other = SnapshotStore(path, max_per_engine=6), SnapshotStore(path, max_per_engine=6)
    for t in range(300):
        engine, url = rng.choice(["hot", "cold", "x"]), rng.choice(["http://a", "http://a", "http://b"])
        rng.choice([store, other]).save(engine, url, [snap(float(t))])
        for e in ("hot", "cold", "x"):
            for u in ("http://a", "http://b"):
                want = [s.timestamp for s in SnapshotStore(path, max_per_engine=6).load(e, u)]
                assert [s.timestamp for s in store.load(e, u)] == want, (t, e, u)
                assert store.newest(e, u) == (want[-1] if want else None)
