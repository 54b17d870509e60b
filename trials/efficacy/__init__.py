"""Remediation efficacy: paired runs of an incident scenario in virtual time, without and with the doctor acting.

Both runs share the trace, the seed and the deployment: the scenario's engines in `sim.harness`, behind a
virtual-time router that runs the real router's sans-IO decisions (router.decide: route by length, the length
limit with its client/model scope -> 413; router.release: per-upstream max in flight with a queue per role
released shortest-first with the fairness window and the batch timeout, fail-over to the other role where the
prompt fits; router.upstreams; router.length_limit), only its clock, timers, health and dispatch simulated.
Every `eval_every_s` the doctor reads the engines (trials.efficacy.reading.Observer: the old in-process twin
of doctor.reading, which the efficacy half of #13 replaces with doctor.cycle) and
runs the playbooks. In `observe` mode it stops there; in `auto` mode `HarnessDoctor` applies the first remedy
of each warning or critical finding through doctor's RouterActuator (its policy API calls answered in process
by the virtual router) and harness engine actuators that act as the real ones do (relaunches blue/green on
spare GPUs, else drain -> stop -> start after the modelled start-up -> warm up -> resume; /sleep + /wake_up
for defragment; a replica or tensor-parallel shards on free simulated GPUs), behind simplified guardrails with
the config's settings (DoctorConfig(): cooldown, hourly budget, bounds, verification window, the length
limit's lift): one action per target per cycle, a cooldown per action and target, an hourly budget, parameter
bounds, a lock per engine while a change is under way, and verification (the planner's VerifySpec for the
playbook and action, the harness's own where the planner has none) with rollback by the inverse.
`measure` turns the requests' client-side view into the comparison's numbers.

The package, one concern a module, layered so that imports only point down:
harness (the client's view of a request) <- vrouter (the virtual router) <- router_ops, engine_ops (the actuators)
<- actor (the doctor's cycle: plan, guard, verify, roll back; attempt is its record of one action),
harness <- result (what a run leaves) <- measure (the numbers) <- runner (one run, a pair of runs).
"""

from doctor.remedy.planner import ROUTER_KINDS
from trials.efficacy.actor import VERIFY_QUEUE, HarnessDoctor
from trials.efficacy.engine_ops import DRAIN_TIMEOUT_S, SETTLE_S, EngineHook
from trials.efficacy.harness import (
    LONG_CLASS_TOKENS,
    LONG_TTFT_SLO_S,
    TPOT_SLO_S,
    TTFT_SLO_S,
    EfficacyHarness,
    Outcome,
    ttft_slo_s,
)
from trials.efficacy.measure import PEAK_WINDOW_S, WINDOW_S, measure, percentile
from trials.efficacy.result import Evaluation, RunResult
from trials.efficacy.router_ops import apply_router_action, policy_api
from trials.efficacy.runner import (
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
from trials.efficacy.vrouter import HEALTH_EVERY_S, VirtualRouter, engine_url, without

__all__ = [
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
    "WINDOW_S",
    "EfficacyHarness",
    "EngineHook",
    "Evaluation",
    "HarnessDoctor",
    "Outcome",
    "Pair",
    "RunResult",
    "VirtualRouter",
    "apply_router_action",
    "engine_url",
    "measure",
    "percentile",
    "policy_api",
    "ramp_arrivals",
    "run",
    "run_pair",
    "ttft_slo_s",
    "without",
]
