"""Raw engine statistics, independent of any vLLM version's naming.

The engine updates a `MetricsState` at event time on its clock; `sim.exposition` renders it with
the names, labels and buckets of one version profile.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field

from sim.profiles import (
    PARAMS_N_BUCKETS,
    REQUEST_NUM_PREEMPTIONS_BUCKETS,
    VersionProfile,
    request_token_buckets,
)


class Histogram:
    """Cumulative-on-render histogram with fixed upper bounds (the +Inf bucket is implicit)."""

    __slots__ = ("bounds", "count", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...], created: float) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.created = created

    def observe(self, value: float) -> None:
        # Prometheus buckets are `le` (value <= bound): bisect_left finds the first bound >= value.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, cumulative count) pairs, ending with +Inf."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass
class ProcessStats:
    """What prometheus_client's process collector would read for the engine's API server."""

    start_time: float
    cpu_seconds: float = 0.0
    resident_bytes: float = 2.1e9
    virtual_bytes: float = 3.4e10
    open_fds: int = 64
    max_fds: int = 1048576


@dataclass
class MetricsState:
    """Every number the sim exposes, in canonical units."""

    created: float
    ttft: Histogram
    itl: Histogram
    request_tpot: Histogram
    e2e: Histogram
    queue: Histogram
    inference: Histogram
    prefill: Histogram
    decode: Histogram
    prompt_tokens_hist: Histogram
    generation_tokens_hist: Histogram
    max_num_generation_tokens: Histogram
    params_n: Histogram
    params_max_tokens: Histogram
    iteration_tokens: Histogram
    prefill_kv_computed: Histogram
    num_preemptions_hist: Histogram
    process: ProcessStats
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries_tokens: int = 0
    prefix_hits_tokens: int = 0
    prefix_queries_blocks: int = 0
    prefix_hits_blocks: int = 0
    prompt_tokens_cached: int = 0
    prompt_tokens_computed: int = 0
    sleep_level: int = 0  # 0 awake, 1 weights offloaded, 2 discard all
    request_success: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (handler, method, status group like "2xx") -> count; duration sums per (handler, method)
    http_requests: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    http_duration: dict[tuple[str, str], Histogram] = field(default_factory=dict)
    # Recent prefix-cache queries/hits (the V1 stats line's rate covers the last 1000 requests).
    recent_prefix: list[tuple[int, int]] = field(default_factory=list)
    cache_config: dict[str, str] = field(default_factory=dict)

    def prefix_hit_rate_recent(self) -> float:
        queries = sum(q for q, _ in self.recent_prefix)
        hits = sum(h for _, h in self.recent_prefix)
        return hits / queries if queries else 0.0

    def record_prefix_lookup(self, queried_tokens: int, hit_tokens: int, block_size: int) -> None:
        self.prefix_queries_tokens += queried_tokens
        self.prefix_hits_tokens += hit_tokens
        self.prefix_queries_blocks += queried_tokens // block_size
        self.prefix_hits_blocks += hit_tokens // block_size
        self.recent_prefix.append((queried_tokens, hit_tokens))
        if len(self.recent_prefix) > 1000:
            del self.recent_prefix[: len(self.recent_prefix) - 1000]

    def record_http(self, handler: str, method: str, status: int, duration_s: float) -> None:
        self.http_requests[(handler, method, f"{status // 100}xx")] += 1
        key = (handler, method)
        hist = self.http_duration.get(key)
        if hist is None:
            hist = self.http_duration[key] = Histogram(HTTP_DURATION_BUCKETS, self.created)
        hist.observe(duration_s)


# prometheus_fastapi_instrumentator's default `http_request_duration_seconds` buckets.
HTTP_DURATION_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1.0)


def new_metrics_state(profile: VersionProfile, max_model_len: int, created: float) -> MetricsState:
    """Histograms with the profile's bucket bounds, all created at `created`."""

    def h(bounds: tuple[float, ...]) -> Histogram:
        return Histogram(bounds, created)

    tokens = request_token_buckets(max_model_len)
    return MetricsState(
        created=created,
        ttft=h(profile.ttft_buckets),
        itl=h(profile.itl_buckets),
        request_tpot=h(profile.itl_buckets),
        e2e=h(profile.request_latency_buckets),
        queue=h(profile.request_latency_buckets),
        inference=h(profile.request_latency_buckets),
        prefill=h(profile.request_latency_buckets),
        decode=h(profile.request_latency_buckets),
        prompt_tokens_hist=h(tokens),
        generation_tokens_hist=h(tokens),
        max_num_generation_tokens=h(tokens),
        params_n=h(PARAMS_N_BUCKETS),
        params_max_tokens=h(tokens),
        iteration_tokens=h(profile.iteration_buckets),
        prefill_kv_computed=h(tokens),
        num_preemptions_hist=h(REQUEST_NUM_PREEMPTIONS_BUCKETS),
        process=ProcessStats(start_time=created),
    )
