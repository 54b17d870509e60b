"""The vLLM V0 engine's families (`vllm/engine/metrics.py`, 0.6/0.7 era), in registration order.

Inferred, not read (see `sim.exposition`):

* V0 runs the multiprocessing frontend (MultiProcessCollector): no python_*/process_* families
  and no `_created`. The order of families is rendered as registered, which MultiProcessCollector
  does not strictly keep. V0 creates label children lazily: a histogram with no observation and a
  finish reason never seen have no samples. 0.6 only: `tokens_total`, spec-decode gauges and the
  `avg_*_throughput_toks_per_s` gauges (rendered 0.0: the state keeps no throughput).
* V0 `lora_requests_info` is stamped with wall-clock time in vLLM; here with `state.created`.
  V0 prefix hit-rate gauges: block hit rate when `enable_prefix_caching` is "True", else -1.
"""

from __future__ import annotations

from prometheus_client.metrics_core import GaugeMetricFamily

from sim.exposition_families import Families, cache_config_info, phase_histograms, release
from sim.profiles import VersionProfile
from sim.stats import MetricsState


def vllm_v0_families(p: VersionProfile, s: MetricsState, f: Families) -> None:
    legacy = release(p) < (0, 8)
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
    phase_histograms(f, s, lazy=True)
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
    cache_config_info(f, s, None)
