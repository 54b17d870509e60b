"""The fleet scale-out decision on the virtual-time harness: a surge on a 4-replica pool is met by the replicas it
needs within the GPU budget, in one decision, and they are given back one by one after it, without flapping.

The real doctor cycle (playbooks, planner, guardrails, executor, launcher, router policy API) over sim engines;
only I/O is the harness's (trials.fleet, trials.efficacy). One run, about 20 s of CPU.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from trials.efficacy.result import RunResult
from trials.fleet import Figures, figures, pool_surge, run_pool

GPUS = 7  # hot x4 + cold use 5: a budget of 2 more replicas, under what the surge needs


@pytest.fixture(scope="module")
def surge() -> tuple[RunResult, Figures]:
    sc = pool_surge(4)
    result = run_pool(sc, gpus=GPUS)
    fig = figures(result, sc, settle_s=120.0)
    print(fig.table())  # the trial's figures, for `pytest -s`
    return result, fig


def _applied(result: RunResult, kind: str) -> list[dict[str, Any]]:
    return [a for a in result.actions if a["action"] == kind and a["status"] in ("applied", "verified")]


def test_the_pool_scales_out_once_by_what_it_needs_within_the_gpu_budget(surge: tuple[RunResult, Figures]) -> None:
    result, fig = surge
    [out] = _applied(result, "scale_out")
    assert out["target"] == "hot" and out["playbook"] in ("queue_pressure", "capacity_scale_out")
    # what the pool's findings proposed: sized to the demand, more than WVA's one-at-a-time, at most 2x
    proposed = {a.params["add_replicas"] for e in result.evaluations for f in e.findings for a in f.remedies[:1]
                if a.kind == "scale_out" and "add_replicas" in a.params}
    assert proposed and min(proposed) >= 2 and max(proposed) <= 4, proposed
    # one decision for the whole pool, trimmed to the free GPUs when the need was larger
    assert out["params"]["add_replicas"] == min(max(proposed), GPUS - 5)
    assert fig.peak == 4 + out["params"]["add_replicas"] == 6
    # nothing scaled while the new replicas were starting, and no tensor-parallel relaunch of a pool member
    assert not _applied(result, "relaunch")
    assert not [a for a in result.actions if a["action"] == "scale_out" and a["t_s"] > out["t_s"]
                and a["status"] != "refused"]


def test_it_scales_back_in_one_replica_at_a_time_after_the_surge(surge: tuple[RunResult, Figures]) -> None:
    result, fig = surge
    ins = _applied(result, "scale_in")
    assert [a["params"]["remove_replica"] for a in ins] == ["hot-r3", "hot-r2"]  # newest first, only added ones
    end_of_surge = 120.0 + 420.0
    assert all(a["t_s"] >= end_of_surge for a in ins)
    assert all(b["t_s"] - a["t_s"] >= 300.0 for a, b in itertools.pairwise(ins))  # the cooldown
    assert fig.final == 4


def test_no_flapping_and_p99_recovers(surge: tuple[RunResult, Figures]) -> None:
    result, fig = surge
    assert fig.phases == ["out", "in"], fig.sizes  # one out-phase, one in-phase
    before, during, after, final = (fig.p99_ttft_s[k] for k in ("before", "surge", "after", "final_size"))
    assert before is not None and during is not None and after is not None and final is not None
    assert during > 2.0  # the surge hurt (the replicas take minutes to be judged, started and warmed)
    for p99 in (after, final):  # two minutes after the surge, and back on the 4 replicas
        assert p99 < 2.0 and p99 < 2 * max(before, 0.25), fig.p99_ttft_s
    assert not [o for o in result.outcomes if o.result == "failed"]  # nothing dropped by adding or removing
