"""Smoke test of `doctor sim calibrate --quick`: it runs and gives a well-formed table (not the targets)."""

from __future__ import annotations

import json
import math

import pytest

from sim.calibrate import kneedle, main


def test_quick_json_runs_and_is_sane(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"scenario", "figures", "details"} <= data.keys()
    keys = {f["key"] for f in data["figures"]}
    assert {"throughput_ratio_8_4", "throughput_ratio_16_4", "p99_e2e_ratio_16_8", "mem_bw_util_8",
            "mem_bw_util_16", "step_time_4k_increase", "long_share_knee_gain"} <= keys
    for f in data["figures"]:
        assert {"seed", "sim", "ratio", "within", "note"} <= f.keys()
        assert math.isfinite(f["seed"]) and f["seed"] > 0
        if f["key"] != "long_share_knee_gain":  # n/a when the gain never vanishes
            assert math.isfinite(f["sim"]), f
    sat = data["details"]["saturation"]
    assert 0 < sat["4"]["qps"] < sat["8"]["qps"]
    assert all(0 < s["mem_busy"] <= 1 for s in sat.values())
    lat = data["details"]["latency"]["8"]
    assert 0 < lat["ttft_p99"] <= lat["e2e_p99"]
    assert data["details"]["long_prompt_effect"]["increase"] > 0


def test_kneedle() -> None:
    assert kneedle([0, 1, 2, 3, 4], [0, 8, 9, 9.5, 10]) == 1
    assert math.isnan(kneedle([0, 1], [0, 1]))
