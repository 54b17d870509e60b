"""The collectors' contract: what one read of a source yields, and the signals derived per engine.

Everything is SI: seconds, bytes, ratios in 0..1, rates per second. A signal that a source cannot
give is `None` and `Signals.reasons[name]` says why (so "no data" never reads as "zero").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Role = Literal["hot", "cold"]
HealthState = Literal["ok", "unhealthy", "unreachable"]


@dataclass(frozen=True)
class HistogramData:
    """One histogram summed over its series: cumulative counts per upper bound (ending with +Inf)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of an engine's /metrics mapped to canonical names.

    `counters` and `gauges` are keyed by canonical name (see collectors.names); labelled counters
    keep one label as `name{value}` keys, e.g. `request_success{length}`. Multiprocess `pid` series
    are folded: counters summed, ratio gauges by maximum.
    """

    timestamp: float
    counters: Mapping[str, float]
    gauges: Mapping[str, float]
    histograms: Mapping[str, HistogramData]
    info: Mapping[str, Mapping[str, str]]  # e.g. cache_config -> its labels
    names_seen: frozenset[str]  # exposed family names, for version detection
    units: Mapping[str, str] = field(default_factory=dict)  # e.g. prefix_cache_queries -> "blocks"
    stats_enabled: bool = True  # False when no vllm: engine family is exposed (--disable-log-stats)
    # canonical name -> why its samples were left out (not finite, negative, a ratio above 1): bad input
    rejected: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sample:
    """One read of one source for one engine. `error` is set when the read failed (and data is empty)."""

    source: str  # "metrics" | "health" | "version" | "logs" | "gpu" | "host" | "prometheus" | "router"
    engine: str
    timestamp: float
    error: str | None = None
    metrics: MetricsSnapshot | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Event:
    """Something a log line (or a state change) says happened."""

    kind: str  # engine_death | cuda_oom | prompt_too_long | nccl_error | preemption | startup_config | xid ...
    engine: str
    timestamp: float
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "engine": self.engine, "timestamp": self.timestamp, "message": self.message,
                "details": dict(self.details)}


# Every signal the collectors derive, in report order. Values are float | None unless noted.
SIGNAL_NAMES: tuple[str, ...] = (
    "uptime_s", "qps", "prompt_tokens_per_s", "generation_tokens_per_s", "running", "waiting",
    # gauges over the window's reads (the instant values above are the newest read)
    "running_min", "running_max", "waiting_min", "waiting_mean", "waiting_max", "kv_cache_usage_mean",
    "kv_cache_usage_max", "gauge_reads", "seq_cap", "generation_idle_s",
    "batch_utilization", "token_budget_utilization", "kv_cache_usage", "prefix_cache_hit_rate",
    "preemptions_per_s",
    "p50_e2e_s", "p95_e2e_s", "p99_e2e_s", "p50_ttft_s", "p95_ttft_s", "p99_ttft_s",
    "p50_itl_s", "p95_itl_s", "p99_itl_s", "p50_queue_s", "p95_queue_s", "p99_queue_s",
    "p50_prefill_s", "p95_prefill_s", "p99_prefill_s",
    "itl_cv", "prefill_s_per_token", "long_prompt_share", "very_long_prompt_share", "error_rate", "abort_rate",
    "dram_utilization", "fb_used_ratio", "memory_growth_ratio", "sm_utilization", "xid_errors", "xid_last_code",
    "ecc_dbe_errors", "process_cpu", "process_rss_bytes",
)


@dataclass(frozen=True)
class Signals:
    """Derived numbers for one engine over one window."""

    engine: str
    window_s: float
    health: HealthState = "unreachable"
    health_status: int | None = None  # HTTP status of /health when it answered
    values: Mapping[str, float | None] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)  # why a value is None, or a caveat
    events: tuple[Event, ...] = ()
    # signals computed from too few requests to judge (a share or quantile of a handful): name -> requests
    weak: Mapping[str, float] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def is_weak(self, name: str) -> bool:
        return name in self.weak

    def to_dict(self) -> dict[str, Any]:
        """The `signals` object of the report: every name present, null with a reason when missing."""
        out: dict[str, Any] = {"health": self.health, "health_status": self.health_status}
        for name in SIGNAL_NAMES:
            out[name] = self.values.get(name)
        extra = {k: v for k, v in self.values.items() if k not in SIGNAL_NAMES}
        out.update(extra)
        out["reasons"] = {k: v for k, v in self.reasons.items()}
        if self.weak:
            out["too_few_requests"] = {k: v for k, v in self.weak.items()}
        return out


@dataclass(frozen=True)
class EngineConfigView:
    """What the collectors know of an engine's configuration (flags, /server_info, cache_config_info)."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    router_max_in_flight: int | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None  # the share of each GPU's memory vLLM reserved at start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def signal_field_names() -> list[str]:
    """Names of the Signals dataclass fields (for schema checks)."""
    return [f.name for f in fields(Signals)]
