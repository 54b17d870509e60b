"""What `doctor sim calibrate` measures against what: the seed article's figures and the scenario.

The figures (seed article, "8xA100 80G" stress test; ../shared/reference/sim-model.md §2.5-2.6), the
tolerance a figure must meet, and the calibration `Scenario` (engine arguments, workload, run
lengths) in its full and quick (`QUICK`, a smoke run) forms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.presets import DEFAULT_PRESET
from sim.workload import WorkloadSpec

TOLERANCE = 0.15
REPLICAS = 8  # the seed's 8xA100 read as eight TP1 replicas (sim-model §2.5); one is simulated

SEED_QPS = {4: 32.0, 8: 55.0, 16: 61.0}
SEED_P99_S = {8: 1.2, 16: 3.8}
SEED_MEM_BW = {8: 0.68, 16: 0.92}
SEED_4K_INCREASE = 0.40
SEED_LONG_KNEE = 0.20
SEED_COLD_START_S = {4: 1.2, 16: 3.8}


@dataclass(frozen=True)
class Scenario:
    """The calibration scenario: engine arguments, workload and run lengths."""

    preset: str = DEFAULT_PRESET
    engine_args: tuple[str, ...] = (
        "--max-model-len", "8192", "--max-num-batched-tokens", "2048", "--num-gpu-blocks-override", "700",
    )
    batches: tuple[int, ...] = (4, 8, 16)
    prompt_median: float = 400.0
    prompt_sigma: float = 0.8
    prompt_cap: int = 4000
    long_share: float = 0.05
    long_min: int = 4096
    long_max: int = 6144
    output_median: float = 50.0
    output_sigma: float = 0.7
    warmup_s: float = 60.0  # staircase warm-up (batch 1, 2, 4, 8, 16) before any load
    sat_rate_qps: float = 30.0  # far above one replica's capacity: the queue never empties
    sat_settle_s: float = 60.0  # after the warm-up, before the measured window
    sat_window_s: float = 400.0
    p99_fraction: float = 0.85
    p99_settle_s: float = 60.0
    p99_window_s: float = 900.0
    knee_batches: tuple[int, int] = (8, 16)
    knee_shares: tuple[float, ...] = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)
    step_batch: int = 8  # decode batch the 4K prompt joins
    step_prompt: int = 4096
    step_output: int = 50
    seed: int = 0

    def argv(self, max_num_seqs: int) -> list[str]:
        return ["meta-llama/Llama-2-13b-chat-hf", "--preset", self.preset, "--max-num-seqs", str(max_num_seqs),
                *self.engine_args, "--seed", str(self.seed)]

    def workload(self, rate_qps: float, duration_s: float, long_share: float | None = None,
                 seed_offset: int = 0) -> WorkloadSpec:
        return WorkloadSpec(
            rate_qps=rate_qps, duration_s=duration_s, prompt_median=self.prompt_median,
            prompt_sigma=self.prompt_sigma, prompt_cap=self.prompt_cap,
            long_share=self.long_share if long_share is None else long_share,
            long_min=self.long_min, long_max=self.long_max, output_median=self.output_median,
            output_sigma=self.output_sigma, seed=self.seed * 1009 + seed_offset,
        )


FULL = Scenario()
QUICK = replace(FULL, warmup_s=20.0, sat_settle_s=30.0, sat_window_s=60.0, p99_settle_s=20.0, p99_window_s=90.0,
                knee_shares=(0.0, 0.2, 0.4))
