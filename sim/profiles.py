"""vLLM version profiles: what each release exposes (metric names, log formats, endpoints).

One list, named by the release whose surface it matches (`major.minor`), shared by the sim and
(through its names) by the collectors. Facts come from ../shared/reference/vllm-observability.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Histogram bucket bounds as vLLM defines them (vllm/v1/metrics/loggers.py, vllm/engine/metrics.py).
V1_TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
V1_ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)
V1_REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)
V1_ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)
V0_TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)
V0_TPOT_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)
V0_REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
)
# --enforce-eager V0 iteration buckets (sic: 8096 is in vLLM's source).
V0_ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8096,
)
PARAMS_N_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 10, 20)


def request_token_buckets(max_model_len: int) -> tuple[float, ...]:
    """The 1-2-5 series up to max_model_len (vLLM's build_1_2_5_buckets)."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(out)
            out.append(value)
        exponent += 1


@dataclass(frozen=True)
class VersionProfile:
    """The observable surface of one vLLM release line."""

    name: str
    version: str  # what GET /version answers
    v1: bool  # V1 engine (else V0)
    # --- metrics ---
    engine_label: bool  # V1 metrics carry engine="0"
    created_series: bool  # prometheus_client `_created` series (V1 single API server)
    kv_usage_old: bool  # vllm:gpu_cache_usage_perc
    kv_usage_new: bool  # vllm:kv_cache_usage_perc
    v0_only_families: bool  # swapped, cpu cache, V0 prefix hit-rate gauges, time_in_queue, ...
    prefix_counters_old: bool  # vllm:gpu_prefix_cache_{queries,hits}_total
    prefix_counters_old_in_blocks: bool  # 0.8.5 counted blocks
    prefix_counters_new: bool  # vllm:prefix_cache_{queries,hits}_total (tokens)
    tpot_histogram: bool  # vllm:time_per_output_token_seconds
    itl_histogram: bool  # vllm:inter_token_latency_seconds
    request_tpot_histogram: bool  # vllm:request_time_per_output_token_seconds
    http_metrics: bool  # prometheus_fastapi_instrumentator families
    waiting_by_reason: bool  # 0.20+
    sleep_state_gauge: bool  # 0.12+
    prompt_tokens_cached: bool  # 0.20+ (cached + by_source)
    prefill_kv_computed: bool  # 0.15+
    request_num_preemptions: bool  # 0.26+
    external_prefix_counters: bool  # 0.12+
    finished_reasons: tuple[str, ...]
    # --- logs ---
    log_prefix: str  # "v06" | "v08" | "v010" (ANSI process prefix) | "v026" (plain process prefix)
    stats_line: str  # "v0" | "v1_fixed" | "v1_parts"
    stats_interval_s: float
    kv_size_line: str  # "v0_blocks" | "v1_two_lines" | "v1_one_line"
    version_line: str  # "api_server" | "server_version"
    listen_line: str  # "v08" | "v015" | "v020"
    prefix_hit_only_with_queries: bool  # 0.33 omits the hit rate without queries
    # --- HTTP ---
    health_dead_status: int  # 500 (<=0.10) or 503 (0.11+)
    nested_error: bool  # {"error": {...}} (0.10+) vs flat {"object": "error", ...}
    context_error: str  # message style for a prompt over max_model_len
    pause_endpoints: bool  # /pause /resume /is_paused (0.12+)
    sleep_returns_body: bool  # 0.33 answers {"status": "sleeping", "level": N}
    default_gpu_memory_utilization: float
    iteration_buckets: tuple[float, ...] = field(default=V1_ITERATION_TOKENS_BUCKETS)

    @property
    def ttft_buckets(self) -> tuple[float, ...]:
        return V1_TTFT_BUCKETS if self.v1 else V0_TTFT_BUCKETS

    @property
    def itl_buckets(self) -> tuple[float, ...]:
        return V1_ITL_BUCKETS if self.v1 else V0_TPOT_BUCKETS

    @property
    def request_latency_buckets(self) -> tuple[float, ...]:
        return V1_REQUEST_LATENCY_BUCKETS if self.v1 else V0_REQUEST_LATENCY_BUCKETS


_V0 = dict(
    v1=False, engine_label=False, created_series=False, kv_usage_old=True, kv_usage_new=False,
    v0_only_families=True, prefix_counters_old=False, prefix_counters_old_in_blocks=False,
    prefix_counters_new=False, tpot_histogram=True, itl_histogram=False,
    request_tpot_histogram=False, waiting_by_reason=False, sleep_state_gauge=False,
    prompt_tokens_cached=False, prefill_kv_computed=False, request_num_preemptions=False,
    external_prefix_counters=False, finished_reasons=("stop", "length"), stats_line="v0",
    stats_interval_s=5.0, kv_size_line="v0_blocks", version_line="api_server",
    prefix_hit_only_with_queries=False, pause_endpoints=False, sleep_returns_body=False,
    default_gpu_memory_utilization=0.9, iteration_buckets=V0_ITERATION_TOKENS_BUCKETS,
)

_V1 = dict(
    v1=True, engine_label=True, created_series=True, v0_only_families=False, stats_interval_s=10.0,
    tpot_histogram=True, prefix_hit_only_with_queries=False, sleep_returns_body=False,
    default_gpu_memory_utilization=0.9,
)


def _profile(**kw: object) -> VersionProfile:
    return VersionProfile(**kw)  # type: ignore[arg-type]


PROFILES: dict[str, VersionProfile] = {
    p.name: p
    for p in (
        _profile(
            name="0.6", version="0.6.6.post1", **_V0, http_metrics=False, log_prefix="v06",
            listen_line="v08", health_dead_status=500, nested_error=False, context_error="v06",
        ),
        _profile(
            name="0.8", version="0.8.5.post1", **_V1, kv_usage_old=True, kv_usage_new=False,
            prefix_counters_old=True, prefix_counters_old_in_blocks=True, prefix_counters_new=False,
            itl_histogram=False, request_tpot_histogram=False, http_metrics=True,
            waiting_by_reason=False, sleep_state_gauge=False, prompt_tokens_cached=False,
            prefill_kv_computed=False, request_num_preemptions=False, external_prefix_counters=False,
            finished_reasons=("stop", "length", "abort"), log_prefix="v08", stats_line="v1_fixed",
            kv_size_line="v1_two_lines", version_line="api_server", listen_line="v08",
            health_dead_status=500, nested_error=False, context_error="v010", pause_endpoints=False,
        ),
        _profile(
            name="0.10", version="0.10.2", **_V1, kv_usage_old=True, kv_usage_new=True,
            prefix_counters_old=True, prefix_counters_old_in_blocks=False, prefix_counters_new=True,
            itl_histogram=True, request_tpot_histogram=False, http_metrics=True,
            waiting_by_reason=False, sleep_state_gauge=False, prompt_tokens_cached=False,
            prefill_kv_computed=False, request_num_preemptions=False, external_prefix_counters=False,
            finished_reasons=("stop", "length", "abort"), log_prefix="v010", stats_line="v1_fixed",
            kv_size_line="v1_two_lines", version_line="api_server", listen_line="v015",
            health_dead_status=500, nested_error=True, context_error="v010", pause_endpoints=False,
        ),
        _profile(
            name="0.10-v0", version="0.10.2", **{**_V0, "stats_interval_s": 5.0}, http_metrics=True,
            log_prefix="v010", listen_line="v015", health_dead_status=500, nested_error=True,
            context_error="v010",
        ),
        _profile(
            name="0.11", version="0.11.0", **_V1, kv_usage_old=False, kv_usage_new=True,
            prefix_counters_old=False, prefix_counters_old_in_blocks=False, prefix_counters_new=True,
            itl_histogram=True, request_tpot_histogram=True, http_metrics=True,
            waiting_by_reason=False, sleep_state_gauge=False, prompt_tokens_cached=False,
            prefill_kv_computed=False, request_num_preemptions=False, external_prefix_counters=False,
            finished_reasons=("stop", "length", "abort"), log_prefix="v010", stats_line="v1_fixed",
            kv_size_line="v1_two_lines", version_line="api_server", listen_line="v015",
            health_dead_status=503, nested_error=True, context_error="v010", pause_endpoints=False,
        ),
        _profile(
            name="0.12", version="0.12.0", **{**_V1, "tpot_histogram": False}, kv_usage_old=False,
            kv_usage_new=True, prefix_counters_old=False, prefix_counters_old_in_blocks=False,
            prefix_counters_new=True, itl_histogram=True, request_tpot_histogram=True,
            http_metrics=True, waiting_by_reason=False, sleep_state_gauge=True,
            prompt_tokens_cached=False, prefill_kv_computed=False, request_num_preemptions=False,
            external_prefix_counters=True, finished_reasons=("stop", "length", "abort"),
            log_prefix="v010", stats_line="v1_parts", kv_size_line="v1_two_lines",
            version_line="api_server", listen_line="v015", health_dead_status=503, nested_error=True,
            context_error="v010", pause_endpoints=True,
        ),
        _profile(
            name="0.20", version="0.20.2", **{**_V1, "tpot_histogram": False,
                                               "default_gpu_memory_utilization": 0.92},
            kv_usage_old=False, kv_usage_new=True, prefix_counters_old=False,
            prefix_counters_old_in_blocks=False, prefix_counters_new=True, itl_histogram=True,
            request_tpot_histogram=True, http_metrics=True, waiting_by_reason=True,
            sleep_state_gauge=True, prompt_tokens_cached=True, prefill_kv_computed=True,
            request_num_preemptions=False, external_prefix_counters=True,
            finished_reasons=("stop", "length", "abort", "error", "repetition"), log_prefix="v010",
            stats_line="v1_parts", kv_size_line="v1_two_lines", version_line="server_version",
            listen_line="v020", health_dead_status=503, nested_error=True, context_error="v010",
            pause_endpoints=True,
        ),
    )
}


def _v026(name: str, version: str) -> VersionProfile:
    return _profile(
        name=name, version=version, **{**_V1, "tpot_histogram": False,
                                        "default_gpu_memory_utilization": 0.92,
                                        "prefix_hit_only_with_queries": name == "0.33",
                                        "sleep_returns_body": name == "0.33"},
        kv_usage_old=False, kv_usage_new=True, prefix_counters_old=False,
        prefix_counters_old_in_blocks=False, prefix_counters_new=True, itl_histogram=True,
        request_tpot_histogram=True, http_metrics=True, waiting_by_reason=True,
        sleep_state_gauge=True, prompt_tokens_cached=True, prefill_kv_computed=True,
        request_num_preemptions=True, external_prefix_counters=True,
        finished_reasons=("stop", "length", "abort", "error", "repetition"), log_prefix="v026",
        stats_line="v1_parts", kv_size_line="v1_one_line", version_line="server_version",
        listen_line="v020", health_dead_status=503, nested_error=True, context_error="v033",
        pause_endpoints=True,
    )


for _name, _version in (("0.26", "0.26.0"), ("0.32", "0.32.0"), ("0.33", "0.33.0")):
    PROFILES[_name] = _v026(_name, _version)

PROFILE_NAMES: tuple[str, ...] = tuple(PROFILES)
DEFAULT_PROFILE = "0.33"


class UnknownProfileError(ValueError):
    """A version profile name that is not in PROFILES."""


def get_profile(name: str) -> VersionProfile:
    """Look a profile up by name, with an error that lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILE_NAMES)
        raise UnknownProfileError(f"unknown vLLM version profile {name!r}; known profiles: {known}") from None
