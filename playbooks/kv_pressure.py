"""kv_pressure: KV-cache usage high for minutes while preemptions or the waiting queue rise."""

from __future__ import annotations

import math
from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence, Severity


class KvPressure(Playbook):
    id = "kv_pressure"
    title = "KV-cache pressure"
    severity = "warning"
    signals = ("kv_cache_usage_mean", "kv_cache_usage_max", "kv_cache_usage", "preemptions_per_s", "waiting_mean",
               "waiting")
    alerts = ("VllmKvCachePressure",)
    defaults: ClassVar[dict[str, float]] = {
        "kv_usage_ratio": 0.75, "preemptions_per_s": 0.0, "waiting": 0.0, "critical_kv_usage_ratio": 0.95,
        # vLLM preempts only when it cannot allocate a block: this many a second over the window prove the KV
        # cache ran out whatever the usage gauge read at the instants it was sampled
        "preemption_proof_per_s": 0.05,
        # more KV when the engine reserved less of its GPUs than they have free: up to this share of each GPU,
        # leaving this margin of the memory that is free now, and only for a raise of at least this much
        "gpu_memory_target_ratio": 0.90, "gpu_memory_margin_ratio": 0.05, "gpu_memory_min_raise_ratio": 0.05,
    }
    for_s = 300.0
    runbook = """\
**What it means.** `vllm:kv_cache_usage_perc` (blocks pinned by running requests; never framebuffer
use), averaged over the window's reads, has stayed above 75% for 5 minutes while requests are being
preempted (V1 recomputes the newest request from scratch) or are waiting for blocks; or requests were
preempted at 0.05/s or more (3 a minute) through those 5 minutes whatever the gauge read: vLLM preempts
only when it cannot allocate a block, so a sustained preemption rate proves the cache ran out even when
the gauge, read at a few instants, happened to read low (it swings from 0% to 93% and back in seconds
while requests are thrown out and readmitted). Throughput falls and tail latency rises as work is
thrown away and redone.

**Confirm by hand.** `rate(vllm:num_preemptions_total[5m]) > 0` with `vllm:kv_cache_usage_perc` near 1
and `vllm:num_requests_waiting > 0`; the stats log line's `Preemptions:` (0.12+).

**Remedies.** When the engine reserved less of its GPUs than they have free (its
`--gpu-memory-utilization` well under 0.9 and framebuffer to spare on every one of its GPUs, so no
other process needs it), relaunch it with more: the KV pool grows by all of the raise, which removes
the cause. Otherwise reduce `max_num_seqs` (a relaunch) so fewer sequences compete for blocks;
meanwhile lower the router's max in flight for the engine. fp8 KV or more tensor-parallel shards
also give more KV.
"""

    def check(self, view: EngineView) -> Condition | None:
        usage = view.pick("kv_cache_usage_mean", "kv_cache_usage")
        kv = view.above(usage, "kv_usage_ratio")
        preempting = view.above("preemptions_per_s", "preemptions_per_s")
        proof = view.above("preemptions_per_s", "preemption_proof_per_s")
        if kv is None and proof is None:
            return None
        supporting = [e for e in (preempting, view.above(view.pick("waiting_mean", "waiting"), "waiting"))
                      if e is not None]
        if kv is None or not supporting:
            if proof is None:
                return None
            peak = view.value("kv_cache_usage_max")
            seen = f" (its usage gauge read at most {peak:.0%})" if peak is not None else ""
            proven = Evidence("preemptions_per_s", proof.value, proof.threshold, view.window_s, ">",
                              "vLLM preempts only when it cannot allocate KV blocks: the cache ran out")
            return Condition(f"KV cache exhausted: {float(proof.value or 0):.2g} preemptions/s over the window{seen}",
                             (proven, *[e for e in supporting if e.signal != "preemptions_per_s"]),
                             agreeing=1 + len([e for e in supporting if e.signal != "preemptions_per_s"]),
                             considered=3)
        critical = (view.value(usage) or 0) >= view.params["critical_kv_usage_ratio"]
        severity: Severity | None = "critical" if critical else None
        over = " on average over the window" if usage == "kv_cache_usage_mean" else ""
        return Condition(f"KV cache {float(kv.value or 0):.0%} used{over} with "
                         + " and ".join("preemptions" if e.signal == "preemptions_per_s" else "requests waiting"
                                        for e in supporting),
                         (kv, *supporting), agreeing=1 + len(supporting), considered=3, severity=severity)

    def _more_memory(self, view: EngineView) -> Action | None:
        """Relaunch with a higher --gpu-memory-utilization when its GPUs have the room (known, never assumed)."""
        p = view.params
        reserved = view.config.gpu_memory_utilization
        used = view.value("fb_used_ratio")  # the fullest of its GPUs, every process on it counted
        if reserved is None or used is None:
            return None
        target = math.floor(min(p["gpu_memory_target_ratio"],
                                reserved + (1.0 - used) - p["gpu_memory_margin_ratio"]) * 100 + 1e-9) / 100
        if target < reserved + p["gpu_memory_min_raise_ratio"]:
            return None
        return Action("relaunch", view.name, {"gpu_memory_utilization": target},
                      inverse={"gpu_memory_utilization": reserved}, risk="medium",
                      description=f"more KV: it reserves {reserved:.0%} of its GPU memory and {1 - used:.0%} is free")

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        current = view.config.max_num_seqs
        target = max(1, int(current * 0.75)) if current else None
        running = view.value("running") or 1.0
        more = self._more_memory(view)
        return [
            *([more] if more is not None else []),
            Action("relaunch", view.name, {"max_num_seqs": target if target else "lower"},
                   inverse={"max_num_seqs": current}, risk="medium",
                   description="reduce max_num_seqs so fewer sequences compete for KV blocks"),
            Action("set_max_in_flight", "router", {"engine": view.name, "max_in_flight": max(1, int(running * 0.75))},
                   inverse={"engine": view.name, "max_in_flight": None}, risk="low"),
        ]


PLAYBOOK = KvPressure()
