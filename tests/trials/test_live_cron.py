"""The doctor as cron runs it on live sim engines over HTTP (#12): one state directory, a run every 15 s.

One deployment for `LIVE_TRIAL_S` (150 s in `make test`, the full five minutes in `make live-trial`; the
suite's 15-minute budget on 2 cores cannot hold five), judged by repeated `doctor diagnose` runs:
- `storm`: a hot engine where every other prompt is a long document, at under 1 request/s;
- `sat`: a hot engine at its sequence cap (4, not in the config) with a queue standing behind it;
- three healthy hot/cold pairs at three seeds.
Before the cron runs, a one-shot run (no history) judges the same engines. Real engines, real HTTP, the shipped
`doctor diagnose`; nothing asserted depends on how fast this machine is, only on what the doctor reports.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from playbooks.long_prompt_share import PLAYBOOK as LONG_PROMPT_SHARE
from sim.testing import ALL_GRAPHED, FAST_START
from trials.live import LoadThread, Mix, Run, SpawnedEngine, cron_runs, diagnose_once, first_run_with, spawn_engine

INTERVAL_S = 15.0
DURATION_S = float(os.environ.get("LIVE_TRIAL_S", "150"))  # make live-trial: 300
if DURATION_S < 8 * INTERVAL_S:  # the storm's `for` plus two runs, and the sequence cap observed, need this long
    raise ValueError(f"LIVE_TRIAL_S must be >= {8 * INTERVAL_S:g} s, got {DURATION_S:g}")
pytestmark = pytest.mark.timeout(DURATION_S + 600)  # the cron runs happen in the module's fixture
# CUDA graphs for every step (no first-batch penalty) and no modelled start-up: the engines are up when timed
BASE = ["m", *ALL_GRAPHED, "--time-scale", "0.1", "--max-model-len", "16384", *FAST_START]
HEALTHY_SEEDS = (0, 1, 2)


@dataclass
class Deployment:
    engines: dict[str, SpawnedEngine]
    loads: dict[str, LoadThread]
    one_shot: Run
    runs: list[Run]
    started: float  # when the load started


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = Path(tmp_path_factory.mktemp("live"))
    ledger = str(tmp / "gpus.json")
    specs: dict[str, tuple[str, list[str], Mix]] = {
        "storm": ("hot", ["--max-num-seqs", "8", "--seed", "7"], Mix(rate_qps=0.8, long_every=2)),
        "sat": ("hot", ["--max-num-seqs", "4", "--seed", "8"], Mix(clients=16, max_tokens=300)),
    }
    for seed in HEALTHY_SEEDS:
        specs[f"hot{seed}"] = ("hot", ["--max-num-seqs", "16", "--seed", str(seed)], Mix(rate_qps=1.5))
        specs[f"cold{seed}"] = ("cold", ["--max-num-seqs", "2", "--seed", str(seed)],
                                Mix(rate_qps=0.2, long_every=1, long_tokens=7000))
    engines: dict[str, SpawnedEngine] = {}
    loads: dict[str, LoadThread] = {}
    try:
        for gpu, (name, (_, argv, _)) in enumerate(specs.items()):
            engines[name] = spawn_engine(name, [*BASE, *argv], gpu=gpu, ledger=ledger)
        config = tmp / "doctor.toml"
        config.write_text(f'[doctor]\nstate_dir = "{tmp / "state"}"\n\n' + "".join(
            f'[[engines]]\nname = "{name}"\nrole = "{role}"\nurl = "{engines[name].url}"\n\n'
            for name, (role, _, _) in specs.items()))
        started = time.time()
        for name, (_, _, mix) in specs.items():
            loads[name] = LoadThread(engines[name].url, mix).start()
        time.sleep(20.0)  # the storm is under way and the queue stands when the on-call engineer looks
        one_shot = diagnose_once(["--config", str(config), "--no-history"])
        runs = cron_runs(["--config", str(config)], interval_s=INTERVAL_S, duration_s=DURATION_S)
        yield Deployment(engines, loads, one_shot, runs, started)
    finally:
        for load in loads.values():
            load.stop()
        for engine in engines.values():
            engine.stop()


def _summary(runs: list[Run], engine: str) -> str:
    return "\n".join(f"t={r.started - runs[0].started:5.0f}s code {r.code} findings "
                     f"{[f['playbook'] for f in r.findings(engine)]} "
                     f"pending {[f['playbook'] for f in r.pending(engine)]}" for r in runs)


def test_the_runs_read_every_engine(deployment: Deployment) -> None:
    assert len(deployment.runs) >= DURATION_S / INTERVAL_S - 2
    for run in deployment.runs:
        assert {e["name"] for e in run.report["engines"] if e["reachable"]} == set(deployment.engines), run.report
    assert all(load.answered > 0 for load in deployment.loads.values())


def test_a_long_document_storm_on_the_hot_engine_is_reported_within_its_for_plus_two_runs(
        deployment: Deployment) -> None:
    runs = deployment.runs
    wanted = {"long_prompt_share", "p99_spike"}
    hit = first_run_with(runs, "storm", wanted)
    assert hit is not None, _summary(runs, "storm")
    # Counted in runs, not seconds, so a slow machine (runs that overrun their 15 s) cannot fail it: runs further
    # apart reach the `for` in fewer runs. The floor: the `for` in runs, plus two runs (the first judges only its
    # own 5 s sample; the condition holds from the second on).
    seen = next(i for i, r in enumerate(runs) if any(f["playbook"] in wanted for f in (*r.pending("storm"),
                                                                                         *r.findings("storm"))))
    assert seen <= 1, _summary(runs, "storm")
    assert runs.index(hit) <= math.ceil(LONG_PROMPT_SHARE.for_s / INTERVAL_S) + 2, _summary(runs, "storm")
    [finding] = [f for f in hit.findings("storm") if f["playbook"] in wanted][:1]
    assert finding["remedies"][0]["action"] in ("set_route_threshold", "length_limit"), finding
    assert finding["evidence"][0]["window_s"] > 5.0  # judged over the window, not one 5 s sample


def test_an_engine_at_its_sequence_cap_is_capacity_not_underfilled_batches(deployment: Deployment) -> None:
    runs = deployment.runs
    hit = first_run_with(runs, "sat", {"queue_pressure", "capacity_scale_out"})
    assert hit is not None, _summary(runs, "sat")
    assert any("the sequence cap is the limit" in f["summary"] for r in runs for f in r.findings("sat")), \
        _summary(runs, "sat")
    for run in [deployment.one_shot, *runs]:
        said = [f["playbook"] for f in [*run.findings("sat"), *run.pending("sat")]]
        assert "batch_underutilized" not in said, _summary(runs, "sat")
    signals = runs[-1].report["engines"][1]["signals"]
    assert signals["seq_cap"] == 4.0 and signals["reasons"]["seq_cap"].startswith("observed"), signals


def test_healthy_pairs_stay_clean_through_the_trial(deployment: Deployment) -> None:
    for seed in HEALTHY_SEEDS:
        for name in (f"hot{seed}", f"cold{seed}"):
            loud = [(r.started - deployment.runs[0].started, f["playbook"], f["summary"])
                    for r in deployment.runs for f in r.findings(name) if f["severity"] != "info"]
            assert not loud, (name, loud)
    assert deployment.runs[-1].started - deployment.runs[0].started >= DURATION_S - INTERVAL_S - 1


def test_one_shot_shows_the_conditions_pending_with_their_onset_and_exit_code_unchanged(
        deployment: Deployment) -> None:
    run = deployment.one_shot
    assert run.report["status"] == "ok" and run.code == 0, run.report.get("findings")
    sat = {f["playbook"]: f for f in run.pending("sat")}
    assert "queue_pressure" in sat, run.report.get("pending")
    q = sat["queue_pressure"]
    assert q["status"] == "pending" and q["onset"] is not None and q["fires_in_s"] > 0
    storm = [f for f in run.pending("storm") if f["playbook"] in ("long_prompt_share", "p99_spike")]
    assert storm, run.report.get("pending")
    assert storm[0]["onset"] is not None and storm[0]["fires_in_s"] > 0
