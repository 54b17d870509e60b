"""A ground-truth sim engine in virtual time behind the doctor's real HTTP reads (trials.sim_io substitutes the
network), and the doctor's own measurement of it; the advisor is told only what doctor.toml says."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from collectors.scrape import parse_metrics
from collectors.types import EngineConfigView, MetricsSnapshot
from doctor.advise.twin import Prediction, measure
from sim.workload import RequestSpec, WorkloadSpec, generate
from trials.scenario import ScenarioHarness
from trials.sim_io import SimNetwork, engine_url

# ADVISE_TRUTH_RATE / _WINDOW_S / _SEED move the ground truth (bench/advise.py reports the spread over seeds).
WARMUP_S = 60.0
WINDOW_S = float(os.environ.get("ADVISE_TRUTH_WINDOW_S", "900"))  # P99 from ~1800 requests
# What the advisor is not told: the step-time scale (a slower GPU, a heavier model than the preset's).
HIDDEN = ["--time-scale", "1.6"]
# What it is told (doctor.toml): a sequence cap too small for the traffic, so that the advice is a change.
TOLD = {"max_num_seqs": int(os.environ.get("ADVISE_TRUTH_SEQS", "16")), "max_num_batched_tokens": 2048}


def workload(rate: float = float(os.environ.get("ADVISE_TRUTH_RATE", "3.0")),
             seed: int = int(os.environ.get("ADVISE_TRUTH_SEED", "1"))) -> list[RequestSpec]:
    return generate(WorkloadSpec(rate_qps=rate, duration_s=WARMUP_S + WINDOW_S + 30, seed=seed))


def truth_argv(extra: Sequence[str] = ()) -> list[str]:
    return ["m", "--preset", "a100-13b", *HIDDEN, "--max-num-seqs", str(TOLD["max_num_seqs"]),
            "--max-num-batched-tokens", str(TOLD["max_num_batched_tokens"]), *extra]


def started(argv: list[str], requests: Sequence[RequestSpec], seed: int = 5) -> tuple[ScenarioHarness, SimNetwork]:
    h = ScenarioHarness(seed=seed)
    h.add_engine("gt", argv)
    # An engine long past its start, as in production: every batch size has paid its cold start (the sim's seed
    # cold start, up to 12 s at batch 64, would otherwise land in the window the first time a size is reached).
    h.engines["gt"].core.seen_batch_classes.update(1 << i for i in range(21))
    h.load(requests)
    h.run_for(WARMUP_S)
    net = SimNetwork(h)
    net.register(engine_url("gt"), "gt")
    return h, net


def config_file(tmp: Path, slo: dict[str, float] | None = None) -> Path:
    lines = ["[[engines]]", 'name = "gt"', f'url = "{engine_url("gt")}"',
             *(f"{k} = {v}" for k, v in TOLD.items())]
    if slo:
        lines += ["[engines.slo]", *(f'{k} = "{v}s"' for k, v in slo.items())]
    path = tmp / "doctor.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def measured_after(extra_flags: Sequence[str], requests: Sequence[RequestSpec]) -> Prediction:
    """The ground-truth engine restarted with `extra_flags` (they win over the earlier ones), measured as the
    doctor measures: a read every 5 s over the window."""
    h, _ = started(truth_argv(extra_flags), requests)
    chain: list[MetricsSnapshot] = []
    end = h.now + WINDOW_S
    while True:
        chain.append(parse_metrics(h.metrics_text("gt"), h.now))
        if h.now >= end - 1e-9:
            break
        h.run_for(5.0)
    core = h.engines["gt"].core.config
    return measure(chain, EngineConfigView(max_num_seqs=core.max_num_seqs,
                                           max_num_batched_tokens=core.max_num_batched_tokens))
