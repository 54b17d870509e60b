"""batch_underutilized: batches run well below the effective cap while requests wait."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence
from playbooks.throughput_drop import max_in_flight_raise


class BatchUnderutilized(Playbook):
    id = "batch_underutilized"
    title = "Batches under-filled"
    severity = "info"
    signals = ("batch_utilization", "waiting_mean", "waiting", "kv_cache_usage_max", "kv_cache_usage",
               "preemptions_per_s")
    alerts = ("VllmBatchUnderutilized",)
    defaults: ClassVar[dict[str, float]] = {
        "batch_utilization_ratio": 0.65,  # the seed article's target: batch utilization above 65%
        "waiting": 0.0,
        "kv_usage_ratio": 0.75,  # above this the waiting is KV-bound (kv_pressure), not a batching chance
        "batch_timeout_ms": 200.0,
        "max_in_flight_raise_factor": 1.25,
    }
    for_s = 120.0
    runbook = """\
**What it means.** Running sequences (their mean over the window's reads) fill less than 65% of the
effective cap (the smallest of `max_num_seqs`, the KV capacity in sequences and the router's max in
flight) while requests are waiting. vLLM does not export `max_num_seqs`: the doctor takes it from the
config, `/server_info` (dev mode) or the start-up log, or sees it (running held at one value while
requests wait); without it the utilisation is unknown and this playbook does not judge.
The engine could batch more work per step and does not: admission releases requests in small groups,
or the router caps the engine below what it can hold. Throughput per GPU is lower than it could be;
nobody is hurt yet. Waiting with a nearly full KV cache is `kv_pressure`, not this.

**Confirm by hand.** `vllm:num_requests_running` against `--max-num-seqs` and the router's cap;
`vllm:num_requests_waiting > 0` at the same time; `vllm:kv_cache_usage_perc` well below 0.75;
`histogram_quantile(0.5, sum by (le) (rate(vllm:iteration_tokens_total_bucket[5m])))` against
`--max-num-batched-tokens` for the token budget.

**Remedies.** Raise the router's batch timeout toward 200 ms so admission groups fill, then raise the
router's max in flight for the engine (never above `max_num_seqs`).
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress or view.cap_binds():
            return None  # running held at the sequence cap: full batches, not under-filled ones
        batch = view.below("batch_utilization", "batch_utilization_ratio")  # unknown without the sequence cap
        waiting = view.above(view.pick("waiting_mean", "waiting"), "waiting")
        if batch is None or waiting is None:
            return None
        kv = view.value(view.pick("kv_cache_usage_max", "kv_cache_usage"))
        if (kv is not None and kv >= view.params["kv_usage_ratio"]) or (view.value("preemptions_per_s") or 0) > 0:
            return None  # the waiting is KV-bound: kv_pressure's finding, not a batching chance
        cap_note = view.signals.reasons.get("batch_utilization", "against the effective cap")
        evidence = (Evidence("batch_utilization", batch.value, batch.threshold, view.window_s, "<", cap_note),
                    Evidence(waiting.signal, waiting.value, waiting.threshold, view.window_s, ">", "work waits"))
        supporting: tuple[Evidence, ...] = ()
        if kv is not None:
            supporting = (Evidence(view.pick("kv_cache_usage_max", "kv_cache_usage"), kv, view.params["kv_usage_ratio"],
                                   view.window_s, "<", "KV has room: the waiting is not KV-bound"),)
        return Condition(f"batches {batch.value:.0%} full while {waiting.value:g} requests wait",
                         (*evidence, *supporting), agreeing=2 + len(supporting), considered=3)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        timeout = int(max(50.0, min(200.0, view.params["batch_timeout_ms"])))
        actions = [Action("set_batch_timeout", "router", {"engine": view.name, "batch_timeout_ms": timeout},
                          inverse={"engine": view.name, "batch_timeout_ms": None}, risk="low",
                          description="wait longer to group requests so batches fill")]
        raise_cap = max_in_flight_raise(view, view.params["max_in_flight_raise_factor"])
        if raise_cap is not None:
            actions.append(raise_cap)
        return actions


PLAYBOOK = BatchUnderutilized()
