"""Benchmark: how fast the harness simulates a 10-minute hot + cold workload (goal: under 10 s wall).

Hot engine: `--max-num-seqs 16 --max-num-batched-tokens 5120 --gpu-memory-utilization 0.85` on GPU 0;
cold engine: `--max-num-seqs 2 --max-model-len 32768` on GPU 1; prompts >= 5120 tokens go cold.
Prints virtual seconds simulated, wall seconds, their ratio, requests and steps, at two load levels.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.harness import Harness, length_router
from sim.workload import WorkloadSpec, generate

MODEL = "meta-llama/Llama-2-13b-chat-hf"
HOT = [MODEL, "--max-num-seqs", "16", "--max-num-batched-tokens", "5120", "--gpu-memory-utilization", "0.85"]
COLD = [MODEL, "--max-num-seqs", "2", "--max-model-len", "32768"]


@dataclass
class Run:
    """One timed run."""

    label: str
    rate_qps: float
    virtual_s: float
    wall_s: float
    requests: int
    completed: int
    steps: int

    @property
    def speedup(self) -> float:
        return self.virtual_s / self.wall_s if self.wall_s else float("inf")


def run(label: str, rate_qps: float, duration_s: float, seed: int) -> Run:
    """Ten minutes (by default) of Poisson load, 3% long prompts, routed by length."""
    t0 = time.perf_counter()
    h = Harness(seed=seed)
    h.add_engine("hot", [*HOT, "--seed", str(seed)], env={"CUDA_VISIBLE_DEVICES": "0"})
    h.add_engine("cold", [*COLD, "--seed", str(seed)], env={"CUDA_VISIBLE_DEVICES": "1"})
    specs = generate(WorkloadSpec(rate_qps=rate_qps, duration_s=duration_s, long_share=0.03, seed=seed))
    h.load(specs, router=length_router(5120))
    h.run_until(h.start + duration_s)
    wall = time.perf_counter() - t0
    steps = sum(e.core.step_count for e in h.engines.values())
    done = sum(1 for r in h.records if r.finished is not None and r.error is None)
    return Run(label, rate_qps, h.now - h.start, wall, len(specs), done, steps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--duration", type=float, default=600.0, help="virtual seconds (default 600)")
    p.add_argument("--rate", type=float, default=4.5, help="QPS near but below capacity (~5.3 QPS; default 4.5)")
    p.add_argument("--low-rate", type=float, default=2.0, help="the comparison's light load (default 2)")
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args(argv)
    runs = [run("near capacity", ns.rate, ns.duration, ns.seed), run("light", ns.low_rate, ns.duration, ns.seed)]
    print(f"hot:  {' '.join(HOT[1:])} (CUDA_VISIBLE_DEVICES=0)")
    print(f"cold: {' '.join(COLD[1:])} (CUDA_VISIBLE_DEVICES=1); prompts >= 5120 tokens go cold")
    print(f"{'load':<14} {'QPS':>5} {'virtual s':>10} {'wall s':>8} {'virtual/wall':>13} {'requests':>9} "
          f"{'completed':>10} {'steps':>8}")
    for r in runs:
        print(f"{r.label:<14} {r.rate_qps:>5.1f} {r.virtual_s:>10.0f} {r.wall_s:>8.2f} {r.speedup:>12.0f}x "
              f"{r.requests:>9} {r.completed:>10} {r.steps:>8}")
    ok = runs[0].wall_s < 10.0
    print(f"goal: a 10-minute workload under 10 s wall: {'met' if ok else 'NOT met'} ({runs[0].wall_s:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
