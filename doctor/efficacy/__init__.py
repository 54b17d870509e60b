"""Remediation efficacy: paired runs of an incident scenario in virtual time, without and with the doctor acting.

Both runs share the trace, the seed and the deployment: the scenario's engines in `sim.harness`, behind a
virtual-time router with the real router's policy semantics (router.policy.Policy: length limit -> 413,
route threshold, per-upstream max in flight with a queue per role released shortest-first with the
fairness window and the batch timeout, upstream states, fail-over to the other role where the prompt fits).
Every `eval_every_s` the doctor reads the engines as `doctor diagnose` does (doctor.accuracy.Observer) and
runs the playbooks. In `observe` mode it stops there; in `auto` mode `HarnessDoctor` applies the first remedy
of each warning or critical finding through harness actuators that act as the real ones do (router policy
changes; relaunches blue/green on spare GPUs, else drain -> stop -> start after the modelled start-up -> warm
up -> resume; /sleep + /wake_up for defragment; a replica or tensor-parallel shards on free simulated GPUs),
behind simplified guardrails: one action per target per cycle, a cooldown per action and target, an hourly
budget, parameter bounds, a lock per engine while a change is under way, and verification (the planner's
VerifySpec for the playbook and action, the harness's own where the planner has none) with rollback by the
inverse.
`measure` turns the requests' client-side view into the comparison's numbers.

The package, one concern a module, layered so that imports only point down:
harness (the client's view of a request) <- vrouter (the virtual router) <- router_ops, engine_ops (the actuators)
<- actor (the doctor's cycle: plan, guard, verify, roll back; attempt is its record of one action),
harness <- result (what a run leaves) <- measure (the numbers) <- runner (one run, a pair of runs).
"""

from doctor.efficacy.actor import BUDGET_PER_HOUR, COOLDOWN_S, VERIFY_QUEUE, VERIFY_S, HarnessDoctor
from doctor.efficacy.engine_ops import DRAIN_TIMEOUT_S, SETTLE_S, EngineHook
from doctor.efficacy.harness import (
    LONG_CLASS_TOKENS,
    LONG_TTFT_SLO_S,
    TPOT_SLO_S,
    TTFT_SLO_S,
    EfficacyHarness,
    Outcome,
    ttft_slo_s,
)
from doctor.efficacy.measure import PEAK_WINDOW_S, WINDOW_S, measure, percentile
from doctor.efficacy.result import Evaluation, RunResult
from doctor.efficacy.router_ops import BATCH_TIMEOUT_BOUNDS_MS
from doctor.efficacy.runner import (
    DRAIN_LIMIT_S,
    PROBE_FROM,
    PROBE_S,
    PROBE_TAIL_S,
    PROBE_TO,
    Pair,
    ramp_arrivals,
    run,
    run_pair,
)
from doctor.efficacy.vrouter import HEALTH_EVERY_S, VirtualRouter, without
from doctor.remedy.planner import ROUTER_KINDS

__all__ = [
    "BATCH_TIMEOUT_BOUNDS_MS",
    "BUDGET_PER_HOUR",
    "COOLDOWN_S",
    "DRAIN_LIMIT_S",
    "DRAIN_TIMEOUT_S",
    "HEALTH_EVERY_S",
    "LONG_CLASS_TOKENS",
    "LONG_TTFT_SLO_S",
    "PEAK_WINDOW_S",
    "PROBE_FROM",
    "PROBE_S",
    "PROBE_TAIL_S",
    "PROBE_TO",
    "ROUTER_KINDS",
    "SETTLE_S",
    "TPOT_SLO_S",
    "TTFT_SLO_S",
    "VERIFY_QUEUE",
    "VERIFY_S",
    "WINDOW_S",
    "EfficacyHarness",
    "EngineHook",
    "Evaluation",
    "HarnessDoctor",
    "Outcome",
    "Pair",
    "RunResult",
    "VirtualRouter",
    "measure",
    "percentile",
    "ramp_arrivals",
    "run",
    "run_pair",
    "ttft_slo_s",
    "without",
]
