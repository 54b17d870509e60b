"""capacity_scale_in: a pool holds a replica the doctor added that its load no longer needs."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence
from playbooks.pool import POOL_DEFAULTS, pool_anchor, pool_of, pool_size, shrink


class CapacityScaleIn(Playbook):
    id = "capacity_scale_in"
    title = "Capacity: scale in"
    severity = "warning"  # acted on (info findings never are): GPUs held for load that is gone
    signals = ("kv_cache_usage_max", "kv_cache_usage", "waiting_mean", "waiting", "batch_utilization", "uptime_s")
    alerts = ()
    defaults: ClassVar[dict[str, float]] = {**POOL_DEFAULTS}
    for_s = 300.0  # the load must fit on one fewer for a sustained window, not one quiet minute
    runbook = """\
**What it means.** A pool of same-role replicas holds a replica the doctor's launcher added during an
earlier surge (`hot-r2` for `hot`), and the pool's load, spread over one replica fewer, would stay under
the scale-up triggers with the same headroom, by llm-d's workload-variant-autoscaler rule: mean KV usage
at most 0.70 (0.80 saturated less 0.10 spare), mean waiting at most 2 (5 less 3), and mean batch
utilization at most 80% — for 5 minutes. Nobody is hurt: the GPUs are spent on load that is gone.
The finding is on the pool's first engine (one per pool). It is never raised while a replica is still
starting or the doctor is changing one, nor until the newest replica has been up 5 minutes (AIBrix's
scale-down cooldown after a scale-out), and only replicas the doctor added are given back: an engine
the config names stays.

**Confirm by hand.** `sum by (role) (vllm:kv_cache_usage_perc)` over the replicas against 0.70 x (N - 1);
`sum(vllm:num_requests_waiting)` against 2 x (N - 1); `vllm:num_requests_running` against
`--max-num-seqs`; `process_start_time_seconds` of the newest replica.

**Remedies.** Remove the newest added replica: the router stops sending it requests (upstream removed),
what it has in flight finishes, then its process is stopped and its GPUs are free. One replica per
decision, and the guardrails' cooldown (`cooldown_s`) spaces the steps. Undo: add a replica again.
"""

    def check(self, view: EngineView) -> Condition | None:
        if pool_size(view) < 2 or pool_anchor(view) != view.name:
            return None  # one finding per pool, on its anchor
        pool = pool_of(view)
        verdict = shrink(pool, view.params)
        if verdict.victim is None:
            return None
        p, n = view.params, len(pool) - 1
        evidence = [Evidence("replicas", float(len(pool)), float(n), view.window_s, ">",
                             f"{verdict.why}; {verdict.victim} was added by the doctor")]
        if verdict.kv is not None:
            evidence.append(Evidence("kv_cache_usage", verdict.kv,
                                     p["pool_kv_saturated_ratio"] - p["pool_kv_spare_ratio"], view.window_s, "<",
                                     f"mean over {n} replicas"))
        if verdict.queue is not None:
            evidence.append(Evidence("waiting", verdict.queue, p["pool_queue_saturated"] - p["pool_queue_spare"],
                                     view.window_s, "<", f"mean over {n} replicas"))
        if verdict.batch is not None:
            evidence.append(Evidence("batch_utilization", verdict.batch, p["pool_target_utilization_ratio"],
                                     view.window_s, "<", f"mean over {n} replicas"))
        return Condition(f"the {view.role} pool's load fits on {n} of its {len(pool)} replicas: {verdict.victim} "
                         "can be given back", tuple(evidence), agreeing=len(evidence) - 1,
                         considered=3, details={"victim": verdict.victim})

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        victim = str(condition.details["victim"])
        return [Action("scale_in", view.name, {"remove_replica": victim}, inverse={"add_replicas": 1},
                       risk="medium", description=f"remove replica {victim}: the router stops sending it "
                       "requests, it finishes what it has, then it is stopped")]


PLAYBOOK = CapacityScaleIn()
