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


def test_repeated_runs_are_each_shown_with_their_median_and_count_beside_nginx(capsys: object) -> None:
    sys.path.insert(0, str(BENCH.parent))
    try:
        import router_overhead  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCH.parent))

    def row(rate: float, run: int, router: float, nginx: float) -> dict[str, float]:
        return {"rate": rate, "run": run, "direct_p50": 0.0001, "router_p50": 0.0001 + router / 1000,
                "nginx_p50": 0.0001 + nginx / 1000}

    rows = [row(200, 1, 0.15, 0.06), row(200, 2, 0.11, 0.06), row(200, 3, 0.10, 0.06),
            row(1000, 1, 0.30, 0.10), row(1000, 2, 0.25, 0.10), row(1000, 3, 0.12, 0.10)]
    router_overhead._runs_beside_nginx(rows)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "goal at 200/s: router's added P50 within 2x of nginx's: median 1.83x (met), met in 2 of 3 runs" in out
    assert "goal at 1000/s: router's added P50 within 2x of nginx's: median 2.50x (NOT met), met in 1 of 3 runs" in out
    assert "0.15/0.06=2.5" in out
