"""kv_pressure: KV-cache usage high for minutes while preemptions or the waiting queue rise."""

from __future__ import annotations

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
    }
    for_s = 300.0
    runbook = """\
**What it means.** `vllm:kv_cache_usage_perc` (blocks pinned by running requests; never framebuffer
use) has stayed above 75% for 5 minutes while requests are being preempted (V1 recomputes the newest
request from scratch) or are waiting for blocks. Throughput falls and tail latency rises as work is
thrown away and redone.

**Confirm by hand.** `rate(vllm:num_preemptions_total[5m]) > 0` with `vllm:kv_cache_usage_perc` near 1
and `vllm:num_requests_waiting > 0`; the stats log line's `Preemptions:` (0.12+).

**Remedies.** Reduce `max_num_seqs` (a relaunch) so fewer sequences compete for blocks; meanwhile
lower the router's max in flight for the engine. More KV (higher `gpu_memory_utilization`, fp8 KV,
more tensor-parallel shards) also helps.
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

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        current = view.config.max_num_seqs
        target = max(1, int(current * 0.75)) if current else None
        running = view.value("running") or 1.0
        return [
            Action("relaunch", view.name, {"max_num_seqs": target if target else "lower"},
                   inverse={"max_num_seqs": current}, risk="medium",
                   description="reduce max_num_seqs so fewer sequences compete for KV blocks"),
            Action("set_max_in_flight", "router", {"engine": view.name, "max_in_flight": max(1, int(running * 0.75))},
                   inverse={"engine": view.name, "max_in_flight": None}, risk="low"),
        ]


PLAYBOOK = KvPressure()
