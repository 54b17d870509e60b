"""Remediation efficacy: paired runs of an incident scenario in virtual time, without and with the doctor acting.

Both runs share the trace, the seed and the deployment (trials.efficacy.deployment): the scenario's engines in
`sim.harness`, started through the doctor's own launcher's process table (trials.sim_procs), behind a
virtual-time router that runs the real router's sans-IO decisions (router.decide: route by length, the length
limit with its client/model scope -> 413; router.release: per-upstream max in flight with a queue per role
released shortest-first with the fairness window and the batch timeout, fail-over to the other role where the
prompt fits; router.upstreams; router.length_limit) and exports the real router's metrics, served with the
policy API on the trial's network (trials.sim_io). Every `eval_every_s` the doctor's own cycle runs
(doctor.cycle.run_cycle, what `doctor diagnose` runs): in `observe` mode it reads and reports; in `auto` mode
it is `doctor diagnose --fix` in auto mode, with the real planner, guardrails (the config's cooldown, hourly
budget, bounds, locks), executor, actuators (router policy API, vLLM admin endpoints, the local launcher with
its blue/green and in-place relaunches, replicas, tensor-parallel scale-out), verification, rollback and lift.
Only I/O is the harness's: the clock, the HTTP transport, the wait, the process table and the GPUs.
`measure` turns the requests' client-side view into the comparison's numbers.

The package, one concern a module, layered so that imports only point down:
harness (the client's view of a request) <- vrouter (the virtual router) <- deployment (engines, router,
config, plan) <- runner (one run, a pair of runs); harness <- result (what a run leaves) <- measure (the
numbers).
"""

from trials.efficacy.deployment import Deployment, deploy
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
from trials.efficacy.vrouter import HEALTH_EVERY_S, ROUTER_URL, VirtualRouter, without
from trials.sim_io import engine_url

__all__ = [
    "DRAIN_LIMIT_S",
    "HEALTH_EVERY_S",
    "LONG_CLASS_TOKENS",
    "LONG_TTFT_SLO_S",
    "PEAK_WINDOW_S",
    "PROBE_FROM",
    "PROBE_S",
    "PROBE_TAIL_S",
    "PROBE_TO",
    "ROUTER_URL",
    "TPOT_SLO_S",
    "TTFT_SLO_S",
    "WINDOW_S",
    "Deployment",
    "EfficacyHarness",
    "Evaluation",
    "Outcome",
    "Pair",
    "RunResult",
    "VirtualRouter",
    "deploy",
    "engine_url",
    "measure",
    "percentile",
    "ramp_arrivals",
    "run",
    "run_pair",
    "ttft_slo_s",
    "without",
]
