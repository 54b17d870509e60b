"""Where a fleet cell turns yellow or red: at the playbooks' own thresholds (their seed defaults; the playbook
classes are the one source), never at numbers made up for the screen. The prefix-cache hit rate is not marked: its
playbook judges it only where prompt templates are configured, which the screen does not know.

`judge(signal, engine)` says "crit", "warn" or "" for one engine's value of a signal.
"""

from __future__ import annotations

import statistics

from playbooks.batch_underutilized import BatchUnderutilized
from playbooks.kv_pressure import KvPressure
from playbooks.memory_fragmentation import MemoryFragmentation
from playbooks.p99_spike import P99Spike
from playbooks.queue_pressure import QueuePressure
from tui.model import EngineRow

KV_WARN = KvPressure.defaults["kv_usage_ratio"]
KV_CRIT = KvPressure.defaults["critical_kv_usage_ratio"]
PREEMPT_WARN = KvPressure.defaults["preemption_proof_per_s"]
WAITING_WARN = QueuePressure.defaults["waiting"]
BATCH_LOW = BatchUnderutilized.defaults["batch_utilization_ratio"]
FB_WARN = MemoryFragmentation.defaults["fb_used_ratio"]
BASELINE_FACTOR = P99Spike.defaults["baseline_factor_ratio"]
BASELINE_MIN_S = P99Spike.defaults["baseline_min_s"]
MIN_BASELINE_POINTS = 5


def _over_baseline(value: float, series: tuple[float, ...]) -> bool:
    """P99Spike's rule on the history the screen has: more than twice its median (and over its floor)."""
    if len(series) < MIN_BASELINE_POINTS:
        return False
    base = statistics.median(series)
    return value > BASELINE_MIN_S and base > 0 and value > BASELINE_FACTOR * base


def judge(signal: str, engine: EngineRow) -> str:
    """"crit", "warn" or "" for the engine's current value of `signal`."""
    if signal == "health":
        return "" if engine.health == "ok" else "crit"
    value = engine.get(signal)
    if value is None:
        return ""
    if signal == "kv_cache_usage":
        return "crit" if value >= KV_CRIT else "warn" if value >= KV_WARN else ""
    if signal == "waiting":
        return "warn" if value > WAITING_WARN else ""
    if signal == "preemptions_per_s":
        return "warn" if value >= PREEMPT_WARN else ""
    if signal == "batch_utilization":  # under-filled matters only while requests wait (the playbook's rule)
        return "warn" if value < BATCH_LOW and (engine.get("waiting") or 0) > 0 else ""
    if signal == "fb_used_ratio":
        return "warn" if value >= FB_WARN else ""
    if signal in ("p99_ttft_s", "p99_e2e_s", "p99_itl_s"):
        return "warn" if _over_baseline(value, engine.history.get(signal, ())) else ""
    return ""


LEGEND = (f"colours at the playbooks' thresholds: KV >= {KV_WARN:.0%} (critical {KV_CRIT:.0%}), waiting > "
          f"{WAITING_WARN:g}, preemptions >= {PREEMPT_WARN:g}/s, batch < {BATCH_LOW:.0%} while waiting, "
          f"framebuffer >= {FB_WARN:.0%}, P99 > {BASELINE_FACTOR:g}x its median")
