"""The fleet scale-out decision in virtual time: a pool of hot replicas, a surge, the doctor sizing the pool.

`pool_surge(n)` is the efficacy harness's scenario with `n` hot replicas (`hot`, `hot-2`, ... behind the
router, one GPU each) and the cold engine: everyday traffic at 45% of the pool's capacity, then the short
prompts' arrival rate x`surge` for `surge_s`, then everyday traffic again. `run_pool` runs it through
trials.efficacy.run (the doctor's own cycle, guardrails and launcher over sim engines; only I/O substituted)
and `figures` reads what matters off the run: the pool's size over time (the router's upstreams), its
direction changes, and the short requests' P99 TTFT before, during and after the surge.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from doctor.config import DoctorConfig
from sim.scenarios import COLD_ARGV, COLD_ENV, HOT_ARGV, HOT_CAPACITY_QPS, EngineSpec, Incident, Scenario
from sim.workload import WorkloadSpec
from trials.efficacy.measure import percentile
from trials.efficacy.result import RunResult
from trials.efficacy.runner import run

LOAD = 0.4  # everyday traffic, per replica, of one replica's capacity
EVAL_EVERY_S = 60.0  # the doctor's cadence (WVA decides every 60 s)
SCALE_COOLDOWN_S = 300.0  # AIBrix's scale-down cooldown, as the operator's guardrail cooldown


@dataclass(frozen=True)
class PoolScenario(Scenario):
    """A Scenario whose hot role is a pool of `hot_replicas` engines (`hot`, `hot-2`, ...), each on its own GPU
    (hot on 0, cold on 1, hot-k on k)."""

    hot_replicas: int = 4

    @property
    def engines(self) -> tuple[EngineSpec, ...]:  # type: ignore[override]
        pool = [EngineSpec("hot", "hot", self.hot_argv, self.hot_env)]
        pool += [EngineSpec(f"hot-{k}", "hot", self.hot_argv, {"CUDA_VISIBLE_DEVICES": str(k)})
                 for k in range(2, self.hot_replicas + 1)]
        return (*pool, EngineSpec("cold", "cold", self.cold_argv, self.cold_env))


def pool_surge(replicas: int = 4, *, surge: float = 3.0, at_s: float = 120.0, surge_s: float = 420.0,
               after_s: float = 780.0) -> PoolScenario:
    """`replicas` hot replicas at LOAD, the short prompts' rate x`surge` from `at_s` for `surge_s` (long prompts
    keep their everyday rate), then `after_s` of everyday traffic."""
    long_share = 0.03
    m = surge * (1 - long_share) + long_share  # the total rate's multiplier that leaves the long prompts' rate
    workload = WorkloadSpec(rate_qps=HOT_CAPACITY_QPS * LOAD * replicas / (1 - long_share), duration_s=3600.0,
                            long_share=long_share,
                            schedule=((at_s, m, long_share / m), (at_s + surge_s, 1.0, long_share)))
    return PoolScenario(
        name=f"pool_surge_{replicas}",
        description=f"{replicas} hot replicas at {LOAD:.0%} of their capacity; from t={at_s:g}s short prompts arrive "
                    f"x{surge:g} for {surge_s:g} s",
        workload=workload, hot_argv=HOT_ARGV, cold_argv=COLD_ARGV, hot_env={"CUDA_VISIBLE_DEVICES": "0"},
        cold_env=dict(COLD_ENV), hot_replicas=replicas,
        timeline=(Incident(at_s, "hot", "workload", note=f"short prompts x{surge:g}"),
                  Incident(at_s + surge_s, "hot", "workload", note="back to everyday traffic")),
        onset_s=at_s, expected_playbook="capacity_scale_out", expected_remedy="scale_out", expected_engine="hot",
        duration_s=at_s + surge_s + after_s)


def pool_config(**kw: Any) -> DoctorConfig:
    """The operator's guardrails for the trial: the shipped defaults with AIBrix's 300 s cooldown."""
    return dataclasses.replace(DoctorConfig(), cooldown_s=SCALE_COOLDOWN_S, **kw)


def run_pool(sc: PoolScenario, *, gpus: int = 8, seed: int = 0, config: DoctorConfig | None = None,
             eval_every_s: float = EVAL_EVERY_S) -> RunResult:
    """The scenario in auto mode on a machine of `gpus` GPUs (the pool's GPU budget)."""
    return run(sc, seed=seed, mode="auto", gpus=gpus, config=config or pool_config(), eval_every_s=eval_every_s)


@dataclass
class Figures:
    """What the trial shows: the hot pool's size over time, its changes, the P99 TTFT of short requests."""

    sizes: list[tuple[float, int]]  # (t_s, hot upstreams at the router) at each change, from t=0
    phases: list[str] = field(default_factory=list)  # "out" / "in" runs of consecutive changes
    p99_ttft_s: dict[str, float | None] = field(default_factory=dict)  # before / surge / after / final_size
    actions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def peak(self) -> int:
        return max(n for _, n in self.sizes)

    @property
    def final(self) -> int:
        return self.sizes[-1][1]

    def table(self) -> str:
        lines = ["t_s      hot replicas"] + [f"{t:7.0f}  {n}" for t, n in self.sizes]
        lines.append("phases: " + (" -> ".join(self.phases) or "none"))
        lines += [f"P99 TTFT {k}: " + ("n/a" if v is None else f"{v:.2f} s") for k, v in self.p99_ttft_s.items()]
        lines += [f"{a['t_s']:7.0f}  {a['action']} {a['target']} {a['params']} {a['status']} ({a['playbook']})"
                  for a in self.actions]
        return "\n".join(lines)


def figures(result: RunResult, sc: PoolScenario, *, settle_s: float = 600.0) -> Figures:
    """The pool's size from the router's policy changes; P99 TTFT of short requests sent before the surge, during
    it, from `settle_s` after it ended, and once the pool was at its final size (failed or unfinished ones count
    as infinitely slow)."""
    size = sc.hot_replicas
    sizes = [(0.0, size)]
    for t, change in result.policy_changes:
        delta = _delta(change)
        if delta:
            size += delta
            sizes.append((t, size))
    phases: list[str] = []
    for (_, a), (_, b) in itertools.pairwise(sizes):
        way = "out" if b > a else "in"
        if not phases or phases[-1] != way:
            phases.append(way)
    at = sc.onset_s or 0.0
    end_surge = next(i.at_s for i in sc.timeline if "back" in i.note)

    def p99(lo: float, hi: float) -> float | None:
        vals = [o.ttft if o.result == "ok" and o.ttft is not None else float("inf")
                for o in result.outcomes if lo <= o.sent - result.t0 < hi and o.cls == "short"
                and o.result != "rejected"]
        return percentile(vals, 99)

    return Figures(sizes, phases, {"before": p99(60.0, at), "surge": p99(at, end_surge),
                                   "after": p99(end_surge + settle_s, result.end_s),
                                   "final_size": p99(max(end_surge, sizes[-1][0]), result.end_s)},
                   [a for a in result.actions if a["action"] != "escalate"])


def _delta(change: str) -> int:
    """+1 / -1 for a policy diff line (router.policy.diff) that adds or removes a hot upstream, else 0."""
    m = re.match(r"upstream \S+ \(hot\) (added|removed)", change)
    return 0 if m is None else 1 if m.group(1) == "added" else -1
