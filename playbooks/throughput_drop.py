"""throughput_drop: tokens (or requests) per second well below their own baseline while demand holds."""

from __future__ import annotations

import math
from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


def raised_max_in_flight(view: EngineView, factor: float) -> int | None:
    """A higher router cap for the engine: the current cap (else what runs now) times `factor`,
    never above max_num_seqs when that is known (more would only queue inside the engine)."""
    current = view.config.router_max_in_flight
    running = view.value("running")
    base = current or (running if running and running > 0 else None)
    if base is None:
        return view.config.max_num_seqs
    target = max(int(base) + 1, math.ceil(base * factor))
    if view.config.max_num_seqs:
        target = min(target, view.config.max_num_seqs)
    return max(target, int(base))


def max_in_flight_raise(view: EngineView, factor: float) -> Action | None:
    """The router action raising the engine's max in flight; None when it is already at max_num_seqs."""
    current = view.config.router_max_in_flight
    target = raised_max_in_flight(view, factor)
    if target is not None and current is not None and target <= current:
        return None
    return Action("set_max_in_flight", "router", {"engine": view.name, "max_in_flight": target or "raise"},
                  inverse={"engine": view.name, "max_in_flight": current}, risk="low",
                  description="admit more requests to the engine at once")


class ThroughputDrop(Playbook):
    id = "throughput_drop"
    title = "Throughput below baseline"
    severity = "warning"
    signals = ("generation_tokens_per_s", "qps", "waiting", "batch_utilization", "dram_utilization")
    alerts = ("VllmThroughputDrop",)
    defaults: ClassVar[dict[str, float]] = {
        "drop_ratio": 0.25,  # throughput this share below its baseline
        "baseline_window_s": 3600.0,
        "baseline_exclude_recent_s": 600.0,
        "min_baseline_tokens_per_s": 1.0,  # an idle baseline says nothing
        "min_baseline_qps": 0.05,
        "batch_low_ratio": 0.65,  # below this the batches are not filling: raise the batch timeout
        "dram_low_ratio": 0.5,  # below this the GPU is not the limit
        "batch_timeout_high_ms": 200.0,
        "batch_timeout_low_ms": 50.0,
        "max_in_flight_raise_factor": 1.25,
    }
    for_s = 300.0
    runbook = """\
**What it means.** Generated tokens per second (or, when token counters are missing, requests per
second) are more than 25% below the engine's own baseline (the median of the last hour, leaving out the
last 10 minutes) while demand has not fallen: requests are waiting, or requests per second are not down
by the same share. Less work is being done for the same offered load. Batch utilization (running
against the effective cap) and DRAM utilization are read as supporting evidence: batches that no longer
fill and a memory controller that is mostly idle mean the engine is starved by admission, not limited by
the GPU.

**Confirm by hand.** `rate(vllm:generation_tokens_total[5m])` against
`rate(vllm:generation_tokens_total[5m] offset 1h)`; `rate(vllm:request_success_total[5m])` for demand
(sum every `finished_reason`); `vllm:num_requests_waiting` and `vllm:num_requests_running`; the stats log
line's `Avg generation throughput:`; `DCGM_FI_PROF_DRAM_ACTIVE` or `nvidia-smi dmon -s u` for the GPU.

**Remedies.** Move the router's batch timeout (50 <-> 200 ms): when batch utilization is low, raise it
toward 200 ms so admission groups fill; when batches are already full, lower it toward 50 ms so they
are released sooner. Then raise the router's max in flight for the engine (up to `max_num_seqs`). If
neither helps, look at the other findings for the same engine (KV pressure, long prompts, a slow GPU).
"""

    def _measure(self, view: EngineView) -> tuple[str, float, float] | None:
        """(signal, value, baseline) for the first throughput signal that has both."""
        p = view.params
        for signal, floor in (("generation_tokens_per_s", p["min_baseline_tokens_per_s"]),
                              ("qps", p["min_baseline_qps"])):
            value = view.value(signal)
            if value is None:
                continue
            base = view.history.baseline(signal, p["baseline_window_s"], p["baseline_exclude_recent_s"])
            if base is not None and base >= floor:
                return signal, value, base
        return None

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress:
            return None
        p = view.params
        measured = self._measure(view)
        if measured is None:
            return None
        signal, value, base = measured
        drop = p["drop_ratio"] * (1 - view.hysteresis) if view.active else p["drop_ratio"]
        limit = base * (1 - p["drop_ratio"])
        if value >= base * (1 - drop):
            return None
        window = p["baseline_window_s"]
        evidence: list[Evidence] = [Evidence(signal, value, limit, view.window_s, "<",
                                             f"baseline {base:.4g}, {1 - value / base:.0%} below it")]
        demand = self._demand(view, signal)
        if demand is None:
            return None  # demand fell with throughput (or cannot be told): a quiet hour, not a fault
        evidence.append(demand)
        supporting: list[Evidence] = []
        batch = view.below("batch_utilization", "batch_low_ratio")
        if batch is not None:
            supporting.append(Evidence("batch_utilization", batch.value, batch.threshold, view.window_s, "<",
                                       "batches are not filling"))
        dram = view.below("dram_utilization", "dram_low_ratio")
        if dram is not None:
            supporting.append(Evidence("dram_utilization", dram.value, dram.threshold, view.window_s, "<",
                                       "the GPU memory bus is mostly idle: not a GPU limit"))
        unit = "tokens/s" if signal == "generation_tokens_per_s" else "requests/s"
        return Condition(f"throughput {value:.4g} {unit}, {1 - value / base:.0%} below its baseline {base:.4g} "
                         f"while demand holds", (*evidence, *supporting), agreeing=1 + len(supporting), considered=3,
                         details={"baseline": base, "baseline_window_s": window, "signal": signal})

    def _demand(self, view: EngineView, signal: str) -> Evidence | None:
        """Evidence that demand holds: requests waiting, or QPS not down by the drop share."""
        p = view.params
        waiting = view.value("waiting")
        if waiting is not None and waiting > 0:
            return Evidence("waiting", waiting, 0.0, view.window_s, ">", "demand holds: requests wait")
        if signal == "qps":
            return None  # QPS is the throughput measured here; it cannot also show demand
        qps = view.value("qps")
        qps_base = view.history.baseline("qps", p["baseline_window_s"], p["baseline_exclude_recent_s"])
        if qps is None or qps_base is None or qps_base < p["min_baseline_qps"]:
            return None
        floor = qps_base * (1 - p["drop_ratio"])
        if qps >= floor:
            return Evidence("qps", qps, floor, view.window_s, ">=", f"demand holds: QPS baseline {qps_base:.4g}")
        return None

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        p = view.params
        batch = view.value("batch_utilization")
        low = max(50.0, min(200.0, p["batch_timeout_low_ms"]))
        high = max(50.0, min(200.0, p["batch_timeout_high_ms"]))
        fill = batch is not None and batch < p["batch_low_ratio"]
        timeout = high if fill else low
        why = ("batches are not filling: wait longer to group requests" if fill
               else "batches are full: release admission groups sooner")
        actions = [Action("set_batch_timeout", "router", {"engine": view.name, "batch_timeout_ms": int(timeout)},
                          inverse={"engine": view.name, "batch_timeout_ms": None}, risk="low", description=why)]
        raise_cap = max_in_flight_raise(view, p["max_in_flight_raise_factor"])
        if raise_cap is not None:
            actions.append(raise_cap)
        return actions


PLAYBOOK = ThroughputDrop()
