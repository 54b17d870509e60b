"""The fleet read bench, small: 20 engines backfilled into a real Prometheus, 10 read directly, by the real doctor.

What it asserts is the read, never its speed: every engine judged from the series it was given (the bench
compares each engine's signals with the direct parse of the same generated exposition), a fleet read being two
queries where per-engine reads are two per engine, and, checked here on the doctor's own reports, each engine's
numbers its own (gauges from its index, rates scaled by 1 + i/1000).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from fleet_read import mismatches  # noqa: E402

ENGINES, DIRECT = 20, 10


def _engines(report: Path) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(report.read_text())["engines"]}


def test_the_bench_reads_every_engine_as_generated(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fleet_read.py"), "--engines", str(ENGINES),
                           "--direct", str(DIRECT), "--sample", "0.5", "--bounds", "64", "--step", "600",
                           "--workdir", str(tmp_path / "work"), "--json", str(out)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())
    by = {r["label"]: r for r in rows["prometheus"] + rows["direct"]}
    assert set(by) == {"grouped", "grouped, kept", "discovered", "per-engine", "direct, 64 at once"}
    for label, row in by.items():
        want = DIRECT if label.startswith("direct") else ENGINES
        assert (row["engines"], row["readable"], row["mismatches"]) == (want, want, []), (label, row)
    assert (by["grouped"]["queries"], by["grouped, kept"]["queries"], by["discovered"]["queries"],
            by["per-engine"]["queries"]) == (1, 1, 1, 2 * ENGINES)  # both points in one range query
    assert "engines through Prometheus" in done.stdout and "read directly" in done.stdout

    for report, count in (("grouped", ENGINES), ("grouped, kept", ENGINES), ("direct, 64 at once", DIRECT)):
        engines = _engines(tmp_path / "work" / f"{report}.json")
        assert len(engines) == count
        for i in range(count):
            signals = engines[f"engine-{i:04d}"]["signals"]
            assert (signals["running"], signals["waiting"], signals["kv_cache_usage"]) == \
                (i % 7, i % 5, (i % 100) / 100), (report, i)
    kept = _engines(tmp_path / "work" / "grouped, kept.json")  # /version and /v1/models from identity.json
    assert {k: (e["version"], e["version_detection"]) for k, e in kept.items()} == \
        {k: (e["version"], e["version_detection"]) for k, e in _engines(tmp_path / "work" / "grouped.json").items()}
    assert all(e["version"] for e in kept.values())
    grouped = _engines(tmp_path / "work" / "grouped.json")
    qps = [grouped[f"engine-{i:04d}"]["signals"]["qps"] for i in (1, ENGINES - 1)]
    assert qps[0] > 0 and qps[1] / qps[0] == pytest.approx((1 + (ENGINES - 1) / 1000) / 1.001)
    discovered = _engines(tmp_path / "work" / "discovered.json")
    assert {e["role"] for e in discovered.values()} == {"hot", "cold"}  # from the targets' role label


def test_a_signal_read_wrong_is_a_mismatch() -> None:
    report = {"engines": [{"name": "a", "reachable": True, "errors": [], "signals": {"qps": 2.0, "running": 3.0}},
                          {"name": "b", "reachable": False, "errors": ["/metrics: refused"], "signals": {}}]}
    assert mismatches(report, {"a": {"qps": 2.0, "running": 3.0}}) == []
    assert mismatches(report, {"a": {"qps": 2.5, "running": 3.0}}) == ["a.qps: read 2.0, generated 2.5"]
    assert mismatches(report, {"a": {"qps": 2.0, "p99_e2e_s": 0.1}}) == ["a.p99_e2e_s: read None, generated 0.1"]
    assert mismatches(report, {"b": {}, "c": {}}) == ["b: ['/metrics: refused']", "c: not in the report"]
