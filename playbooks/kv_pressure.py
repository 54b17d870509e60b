"""kv_pressure: KV-cache usage high for minutes while preemptions or the waiting queue rise."""

from __future__ import annotations

import math
from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Severity


class KvPressure(Playbook):
    id = "kv_pressure"
    title = "KV-cache pressure"
    severity = "warning"
    signals = ("kv_cache_usage", "preemptions_per_s", "waiting")
    alerts = ("VllmKvCachePressure",)
    defaults: ClassVar[dict[str, float]] = {
        "kv_usage_ratio": 0.75, "preemptions_per_s": 0.0, "waiting": 0.0, "critical_kv_usage_ratio": 0.95,
        # more KV when the engine reserved less of its GPUs than they have free: up to this share of each GPU,
        # leaving this margin of the memory that is free now, and only for a raise of at least this much
        "gpu_memory_target_ratio": 0.90, "gpu_memory_margin_ratio": 0.05, "gpu_memory_min_raise_ratio": 0.05,
    }
    for_s = 300.0
    runbook = """\
**What it means.** `vllm:kv_cache_usage_perc` (blocks pinned by running requests; never framebuffer
use) has stayed above 75% for 5 minutes while requests are being preempted (V1 recomputes the newest
request from scratch) or are waiting for blocks. Throughput falls and tail latency rises as work is
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
        kv = view.above("kv_cache_usage", "kv_usage_ratio")
        if kv is None:
            return None
        supporting = [e for e in (view.above("preemptions_per_s", "preemptions_per_s"),
                                  view.above("waiting", "waiting")) if e is not None]
        if not supporting:
            return None
        critical = (view.value("kv_cache_usage") or 0) >= view.params["critical_kv_usage_ratio"]
        severity: Severity | None = "critical" if critical else None
        return Condition(f"KV cache {kv.value:.0%} used with "
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
