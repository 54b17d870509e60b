"""sim.exposition: the /metrics text of each vLLM version profile, read back with the Prometheus parser."""

from __future__ import annotations

import math
from functools import cache

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sim.exposition import CONTENT_TYPE, render_metrics
from sim.profiles import PROFILE_NAMES, PROFILES, VersionProfile, request_token_buckets
from sim.stats import MetricsState, new_metrics_state

CREATED = 1_790_000_000.0
MODEL = "Qwen/Qwen3-8B"


def _state(profile: VersionProfile) -> MetricsState:
    s = new_metrics_state(profile, max_model_len=8192, created=CREATED)
    s.cache_config = {"block_size": "16", "enable_prefix_caching": "True", "num_gpu_blocks": "4096"}
    s.running, s.waiting, s.kv_usage = 7, 3, 0.42
    s.prompt_tokens, s.generation_tokens, s.preemptions = 12345, 678, 9
    s.prompt_tokens_cached, s.prompt_tokens_computed = 2000, 10345
    s.record_prefix_lookup(4096, 2048, block_size=16)
    s.request_success["stop"] += 5
    s.request_success["length"] += 2
    for v in (0.02, 0.3, 0.3, 12.0):
        s.ttft.observe(v)
    for v in (0.01, 0.05, 0.2):
        s.itl.observe(v)
    s.e2e.observe(4.0)
    s.queue.observe(0.1)
    s.iteration_tokens.observe(300)
    s.prompt_tokens_hist.observe(1500)
    s.record_http("/v1/chat/completions", "POST", 200, 0.7)
    s.record_http("/v1/chat/completions", "POST", 503, 0.01)
    s.record_http("/health", "GET", 200, 0.001)
    return s


def _families(text: bytes) -> dict[str, Metric]:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


@cache
def _render(name: str, stats_enabled: bool = True) -> tuple[VersionProfile, MetricsState, dict[str, Metric]]:
    """Render and parse once per (profile, flag); the tests only read the result."""
    profile = PROFILES[name]
    state = _state(profile)
    text = render_metrics(profile, state, model_name=MODEL, stats_enabled=stats_enabled)
    return profile, state, _families(text)


def _release(profile: VersionProfile) -> tuple[int, int]:
    major, minor = profile.version.split(".")[:2]
    return int(major), int(minor)


def _buckets(fam: Metric) -> list[tuple[float, float]]:
    return [(float(s.labels["le"]), s.value) for s in fam.samples if s.name.endswith("_bucket")]


def _value(fam: Metric, suffix: str) -> float:
    return next(s.value for s in fam.samples if s.name == fam.name + suffix)


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_family_set_and_types_follow_the_release(name: str) -> None:
    profile, _, fams = _render(name)
    rel = _release(profile)
    expect = {
        "vllm:kv_cache_usage_perc": profile.v1 and rel >= (0, 10),
        "vllm:gpu_cache_usage_perc": rel <= (0, 10),
        "vllm:time_per_output_token_seconds": rel <= (0, 11),
        "vllm:inter_token_latency_seconds": profile.v1 and rel >= (0, 10),
        "vllm:request_time_per_output_token_seconds": profile.v1 and rel >= (0, 11),
        "vllm:num_requests_swapped": not profile.v1,
        "vllm:time_in_queue_requests": not profile.v1,
        "vllm:avg_prompt_throughput_toks_per_s": rel < (0, 8),
        "vllm:gpu_prefix_cache_queries": profile.v1 and rel <= (0, 10),
        "vllm:prefix_cache_queries": profile.v1 and rel >= (0, 10),
        "vllm:num_requests_waiting_by_reason": rel >= (0, 20),
        "vllm:engine_sleep_state": rel >= (0, 12),
        "vllm:external_prefix_cache_hits": rel >= (0, 12),
        "vllm:prompt_tokens_by_source": rel >= (0, 20),
        "vllm:request_prefill_kv_computed_tokens": rel >= (0, 15),
        "vllm:request_num_preemptions": rel >= (0, 26),
        "http_requests": rel >= (0, 8),
        "process_resident_memory_bytes": profile.v1,
    }
    for family, present in expect.items():
        assert (family in fams) == present, family
    types = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:iteration_tokens_total": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:cache_config_info": "gauge",
    }
    for family, typ in types.items():
        assert fams[family].type == typ, family


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_labels_engine_and_created_series(name: str) -> None:
    profile, _, fams = _render(name)
    vllm = [f for n, f in fams.items() if n.startswith("vllm:") and n != "vllm:lora_requests_info"]
    base = ["engine", "model_name"] if profile.engine_label else ["model_name"]
    for fam in vllm:
        if fam.name == "vllm:cache_config_info":
            continue
        # The frontend's admission rejections carry no engine label (vLLM 0.26+).
        want = ["model_name"] if fam.name.startswith("vllm:admission_rejections") else base
        for s in fam.samples:
            assert [k for k in sorted(s.labels) if k in ("engine", "model_name")] == want, s
            assert s.labels["model_name"] == MODEL
            if "engine" in want:
                assert s.labels["engine"] == "0"
    created = [n for n in fams if n.endswith("_created")]
    assert bool(created) == profile.created_series
    if profile.created_series:
        assert _value(fams["vllm:num_preemptions_created"], "") == CREATED
        assert _value(fams["vllm:time_to_first_token_seconds_created"], "") == CREATED
    for fam in fams.values():
        if fam.type == "counter":
            assert all(s.name in (fam.name + "_total", fam.name + "_created") for s in fam.samples), fam.name
    info = fams["vllm:cache_config_info"].samples[0]
    assert info.value == 1.0
    assert info.labels["num_gpu_blocks"] == "4096"
    assert ("engine" in info.labels) == (profile.v1 and _release(profile) >= (0, 9))
    assert "model_name" not in info.labels


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_values_and_histogram_bounds_come_back(name: str) -> None:
    profile, _, fams = _render(name)
    assert _value(fams["vllm:num_requests_running"], "") == 7
    assert _value(fams["vllm:num_requests_waiting"], "") == 3
    kv = "vllm:kv_cache_usage_perc" if profile.kv_usage_new else "vllm:gpu_cache_usage_perc"
    assert _value(fams[kv], "") == pytest.approx(0.42)
    assert _value(fams["vllm:prompt_tokens"], "_total") == 12345
    assert _value(fams["vllm:generation_tokens"], "_total") == 678
    assert _value(fams["vllm:num_preemptions"], "_total") == 9
    success = {s.labels["finished_reason"]: s.value for s in fams["vllm:request_success"].samples}
    success = {k: v for k, v in success.items() if k}  # _created samples share the label
    if profile.v1:
        assert list(success) == list(profile.finished_reasons)
    else:  # V0 creates a child only for reasons it has seen
        assert set(success) == {"stop", "length"}
    assert success["stop"] == 5 and success["length"] == 2

    ttft = fams["vllm:time_to_first_token_seconds"]
    assert [b for b, _ in _buckets(ttft)] == [*profile.ttft_buckets, math.inf]
    assert _value(ttft, "_count") == 4
    assert _value(ttft, "_sum") == pytest.approx(12.62)
    assert dict(_buckets(ttft))[0.02] == 1 and dict(_buckets(ttft))[0.5] == 3
    assert dict(_buckets(ttft))[math.inf] == 4

    it = fams["vllm:iteration_tokens_total"]
    assert [b for b, _ in _buckets(it)] == [*profile.iteration_buckets, math.inf]
    assert {s.name for s in it.samples} >= {
        "vllm:iteration_tokens_total_bucket",
        "vllm:iteration_tokens_total_sum",
        "vllm:iteration_tokens_total_count",
    }
    prompt = fams["vllm:request_prompt_tokens"]
    assert [b for b, _ in _buckets(prompt)] == [*request_token_buckets(8192), math.inf]
    assert _value(prompt, "_sum") == 1500
    e2e = fams["vllm:e2e_request_latency_seconds"]
    assert [b for b, _ in _buckets(e2e)] == [*profile.request_latency_buckets, math.inf]

    itl = fams[
        "vllm:inter_token_latency_seconds" if profile.itl_histogram else "vllm:time_per_output_token_seconds"
    ]
    assert [b for b, _ in _buckets(itl)] == [*profile.itl_buckets, math.inf]
    assert _value(itl, "_count") == 3

    decode = fams["vllm:request_decode_time_seconds"]
    assert bool(decode.samples) == profile.v1  # V0: no observation, no child


@pytest.mark.parametrize("name", [n for n in PROFILE_NAMES if PROFILES[n].v1])
def test_v1_prefix_counters_and_state_gauges(name: str) -> None:
    profile, _, fams = _render(name)
    if profile.prefix_counters_old:
        expected = 4096 // 16 if profile.prefix_counters_old_in_blocks else 4096
        assert _value(fams["vllm:gpu_prefix_cache_queries"], "_total") == expected
    if profile.prefix_counters_new:
        assert _value(fams["vllm:prefix_cache_queries"], "_total") == 4096
        assert _value(fams["vllm:prefix_cache_hits"], "_total") == 2048
    if profile.waiting_by_reason:
        by = {s.labels["reason"]: s.value for s in fams["vllm:num_requests_waiting_by_reason"].samples}
        assert by == {"capacity": 3, "deferred": 0}
    if profile.sleep_state_gauge:
        sleep = {s.labels["sleep_state"]: s.value for s in fams["vllm:engine_sleep_state"].samples}
        assert sleep == {"awake": 1, "weights_offloaded": 0, "discard_all": 0}
    if profile.prompt_tokens_cached:
        src = {
            s.labels["source"]: s.value
            for s in fams["vllm:prompt_tokens_by_source"].samples
            if s.name.endswith("_total")
        }
        assert src == {"local_compute": 10345, "local_cache_hit": 2000, "external_kv_transfer": 0}
        assert _value(fams["vllm:prompt_tokens_cached"], "_total") == 2000


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_disable_log_stats_drops_every_vllm_family(name: str) -> None:
    profile, _, fams = _render(name, stats_enabled=False)
    assert not [n for n in fams if n.startswith("vllm:")]
    if profile.v1:
        assert "python_info" in fams and "process_cpu_seconds" in fams


@pytest.mark.parametrize("name", [n for n in PROFILE_NAMES if PROFILES[n].http_metrics])
def test_http_families(name: str) -> None:
    _, _, fams = _render(name)
    reqs = {
        (s.labels["handler"], s.labels["status"]): s.value
        for s in fams["http_requests"].samples
        if s.name == "http_requests_total"
    }
    assert reqs == {("/v1/chat/completions", "2xx"): 1, ("/v1/chat/completions", "5xx"): 1}
    lowr = fams["http_request_duration_seconds"]
    assert [b for b, _ in _buckets(lowr)] == [0.1, 0.5, 1.0, math.inf]
    assert _value(lowr, "_count") == 2
    highr = fams["http_request_duration_highr_seconds"]
    assert _value(highr, "_count") == 2
    assert fams["http_request_size_bytes"].type == "summary"
    assert _value(fams["http_response_size_bytes"], "_count") == 2


def test_python_info_and_process_values_are_modelled() -> None:
    profile = PROFILES["0.33"]
    state = _state(profile)
    state.process.cpu_seconds = 12.5
    fams = _families(render_metrics(profile, state, model_name=MODEL, python_version=(3, 11, 9)))
    assert fams["python_info"].samples[0].labels["version"] == "3.11.9"
    assert _value(fams["process_cpu_seconds"], "_total") == 12.5
    assert _value(fams["process_start_time_seconds"], "") == CREATED
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_render_is_deterministic(name: str) -> None:
    profile = PROFILES[name]
    state = _state(profile)
    first = render_metrics(profile, state, model_name=MODEL)
    assert first == render_metrics(profile, state, model_name=MODEL)
    assert first == render_metrics(profile, _state(profile), model_name=MODEL)
