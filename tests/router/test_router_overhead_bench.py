"""The router overhead benchmark still runs end to end (its figures are for bench/, not asserted here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "router_overhead.py"


def test_router_overhead_bench_runs_both_paths_with_streaming() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--upstream", "stub", "--rates", "20", "--seconds", "1",
                           "--stream"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "whole response:" in lines and "first chunk:" in lines
    rows = [line.split() for line in lines if line.strip().startswith("20 ")]
    assert len(rows) == 2  # one row per measure at the one rate
    for row in rows:
        measured, errors = int(row[2]), int(row[3])
        assert measured > 0 and errors == 0
    assert any(line.startswith("goal at 20/s") for line in lines)
