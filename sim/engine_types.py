"""The engine core's value types: its resolved arguments, its start-up failure, a step, recent steps.

`EngineConfig` (the `vllm serve` arguments, resolved), `EngineStartError` (start-up failed as vLLM
fails, with the log lines printed), `Step` (a scheduled step in flight) and `BusyWindow` (recent
steps, behind the GPU utilisation readings).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.scheduler import ScheduledBatch
from sim.steptime import StepCost


@dataclass
class EngineConfig:
    """The `vllm serve` arguments the model uses, resolved to values."""

    model: str
    served_model_name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    gpu_memory_utilization: float
    tensor_parallel_size: int = 1
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    scheduling_policy: str = "fcfs"
    enable_sleep_mode: bool = False
    disable_log_stats: bool = False
    block_size: int = 16
    num_gpu_blocks_override: int | None = None
    long_prefill_token_threshold: int = 0
    enforce_eager: bool = False
    gpus: tuple[int, ...] = (0,)
    seed: int = 0
    time_scale: float = 1.0
    startup_scale: float = 1.0  # sim: multiplies the modelled start-up (0 = ready at once)
    compilation_level: int = 3  # -O / --compilation-config level (mode); 0 = no torch.compile (V1)
    cudagraph_mode: str | None = None  # --compilation-config cudagraph_mode; "NONE" = no CUDA graphs
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # --compilation-config cudagraph_capture_sizes
    max_cudagraph_capture_size: int | None = None  # --compilation-config max_cudagraph_capture_size


class EngineStartError(Exception):
    """The engine could not start (as vLLM fails at start-up); `lines` are the log lines it printed."""

    def __init__(self, message: str, lines: list[str] | None = None) -> None:
        super().__init__(message)
        self.lines = lines or []


@dataclass
class Step:
    """A scheduled step in flight."""

    batch: ScheduledBatch
    cost: StepCost
    start: float

    @property
    def end(self) -> float:
        return self.start + self.cost.duration_s


@dataclass
class BusyWindow:
    """Recent steps, for utilisation over the last second."""

    steps: deque[tuple[float, float, float, float]] = field(default_factory=deque)  # end, dur, mem, comp

    def add(self, end: float, cost: StepCost, keep_s: float = 5.0) -> None:
        self.steps.append((end, cost.duration_s, cost.memory_busy_s, cost.compute_busy_s))
        while self.steps and self.steps[0][0] < end - keep_s:
            self.steps.popleft()

    def ratios(self, now: float, window: float = 1.0) -> tuple[float, float, float]:
        while self.steps and self.steps[0][0] < now - window:
            self.steps.popleft()
        busy = sum(s[1] for s in self.steps)
        mem = sum(s[2] for s in self.steps)
        comp = sum(s[3] for s in self.steps)
        return min(1.0, busy / window), min(1.0, mem / window), min(1.0, comp / window)
