"""Parsing /metrics texts of every vLLM release into the canonical snapshot (hand-written fixtures)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.scrape import (
    SCRAPE_INFO,
    ScrapeError,
    engine_count,
    has_engine_label,
    parse_metrics,
    snapshot_from_samples,
)
from sim.exposition import render_metrics
from sim.profiles import get_profile
from sim.stats import new_metrics_state

FIXTURES = Path(__file__).parent / "fixtures"
VERSIONS = ("0.6", "0.8", "0.10", "0.11", "0.12", "0.20", "0.33")


def load(name: str, ts: float = 1010.0):
    return parse_metrics((FIXTURES / f"metrics_{name}.txt").read_text(), ts)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_release_maps_to_the_canonical_set(version: str) -> None:
    snap = load(f"{version}_b")
    assert snap.stats_enabled
    assert snap.counters["prompt_tokens"] == 120000
    assert snap.counters["generation_tokens"] == 45000
    assert snap.counters["preemptions"] == 10
    assert snap.gauges["running"] == 12 and snap.gauges["waiting"] == 3
    assert snap.gauges["kv_cache_usage"] == pytest.approx(0.42)
    assert snap.counters["request_success{length}"] == 58
    for hist in ("ttft", "itl", "e2e", "queue", "prefill", "prompt_len", "generation_len", "iteration_tokens"):
        h = snap.histograms[hist]
        assert h.bounds[-1] == float("inf") and h.cumulative[-1] == h.count
        assert list(h.cumulative) == sorted(h.cumulative)
    assert snap.info["cache_config"]["num_gpu_blocks"] == "2000"
    assert not any(n.endswith("_created") for n in snap.names_seen)
    v1 = version != "0.6"
    assert has_engine_label(snap) is v1
    assert snap.info[SCRAPE_INFO]["engines"] == ("0" if v1 else "")
    assert ("process_start_time" in snap.gauges) is v1  # V0 serves through MultiProcessCollector
    assert ("http_requests{2xx}" in snap.counters) is v1


def test_version_specific_names() -> None:
    assert "prefix_cache_hit_rate_v0" in load("0.6_b").gauges
    assert load("0.6_b").gauges["prefix_cache_hit_rate_v0"] == pytest.approx(0.31)
    old = load("0.8_b")  # gpu_prefix_cache_* counted blocks in 0.8.x
    assert old.units["prefix_cache_queries"] == "blocks" and old.counters["prefix_cache_queries"] == 51000
    both = load("0.10_b")  # both names: the new (tokens) wins
    assert both.units["prefix_cache_queries"] == "tokens" and both.counters["prefix_cache_queries"] == 816000
    assert "vllm:gpu_cache_usage_perc" in both.names_seen and "vllm:kv_cache_usage_perc" in both.names_seen
    assert "vllm:time_per_output_token_seconds" not in load("0.12_b").names_seen
    assert load("0.33_b").counters["request_success{error}"] == 2


def test_http_requests_keep_generation_handlers_only() -> None:
    snap = load("0.20_b")
    assert snap.counters["http_requests{2xx}"] == 538  # /v1/models traffic is not counted
    assert snap.counters["http_requests{5xx}"] == 5


def test_underscore_spelling_equals_colon_spelling() -> None:
    colon, under = load("0.33_b"), load("0.33_underscore_b")
    assert colon.counters == under.counters
    assert colon.gauges == under.gauges
    assert colon.histograms == under.histograms
    assert colon.units == under.units
    assert {n.replace("vllm:", "vllm_") for n in colon.names_seen} == set(under.names_seen)


def test_custom_bucket_bounds_are_read_from_the_scrape() -> None:
    assert load("0.33_custom_b").histograms["ttft"].bounds == (0.05, 0.2, 1.0, 4.0, 16.0, float("inf"))


def test_multiprocess_pid_series_fold() -> None:
    snap = load("0.8_mp_b")
    assert snap.gauges["running"] == 12  # 5 + 7: counts are summed over pids
    assert snap.gauges["waiting"] == 3
    assert snap.gauges["kv_cache_usage"] == pytest.approx(0.42)  # max(0.30, 0.42), never summed
    assert snap.info[SCRAPE_INFO]["pids"] == "4021,4022"
    assert "process_start_time" not in snap.gauges


def test_pid_labelled_counters_and_histograms_are_summed() -> None:
    rows = [
        ("vllm:prompt_tokens_total", {"pid": "1", "engine": "0"}, 10.0),
        ("vllm:prompt_tokens_total", {"pid": "2", "engine": "0"}, 32.0),
        ("vllm:prompt_tokens_created", {"pid": "2", "engine": "0"}, 5.0),
        ("vllm:kv_cache_usage_perc", {"pid": "1", "engine": "0"}, 0.7),
        ("vllm:kv_cache_usage_perc", {"pid": "2", "engine": "0"}, 0.5),
        ("vllm:time_to_first_token_seconds_bucket", {"pid": "1", "le": "0.1"}, 1.0),
        ("vllm:time_to_first_token_seconds_bucket", {"pid": "1", "le": "+Inf"}, 2.0),
        ("vllm:time_to_first_token_seconds_bucket", {"pid": "2", "le": "0.1"}, 3.0),
        ("vllm:time_to_first_token_seconds_bucket", {"pid": "2", "le": "+Inf"}, 3.0),
        ("vllm:time_to_first_token_seconds_sum", {"pid": "1"}, 0.4),
        ("vllm:time_to_first_token_seconds_count", {"pid": "1"}, 2.0),
        ("vllm:time_to_first_token_seconds_sum", {"pid": "2"}, 0.1),
        ("vllm:time_to_first_token_seconds_count", {"pid": "2"}, 3.0),
    ]
    snap = snapshot_from_samples(rows, 5.0)
    assert snap.counters == {"prompt_tokens": 42.0}
    assert snap.gauges == {"kv_cache_usage": 0.7}
    h = snap.histograms["ttft"]
    assert h.bounds == (0.1, float("inf")) and h.cumulative == (4.0, 5.0) and h.count == 5.0
    assert h.sum == pytest.approx(0.5)
    assert "vllm:prompt_tokens" in snap.names_seen and "vllm:prompt_tokens_created" not in snap.names_seen


def test_data_parallel_engines_fold() -> None:
    snap = load("0.20_dp2_b")
    assert engine_count(snap) == 2
    assert snap.gauges["running"] == 16 and snap.gauges["waiting"] == 5
    assert snap.gauges["kv_cache_usage"] == pytest.approx(0.42)
    assert snap.counters["prompt_tokens"] == 220000  # 120000 + 100000
    assert snap.histograms["ttft"].count == 140 + 100


def test_samples_path_matches_text_path() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = (FIXTURES / "metrics_0.11_b.txt").read_text()
    rows = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    a, b = parse_metrics(text, 1.0), snapshot_from_samples(rows, 1.0)
    assert (a.counters, a.gauges, a.histograms, a.info, a.units) == (b.counters, b.gauges, b.histograms, b.info,
                                                                    b.units)
    assert a.names_seen == b.names_seen


def test_stats_disabled_still_parses() -> None:
    profile = get_profile("0.33")
    text = render_metrics(profile, new_metrics_state(profile, 8192, 1.0), model_name="m",
                          stats_enabled=False).decode()
    snap = parse_metrics(text, 2.0)
    assert not snap.stats_enabled
    assert has_engine_label(snap) is None
    assert "process_start_time" in snap.gauges
    assert parse_metrics("", 1.0).stats_enabled is False


@pytest.mark.parametrize(("text", "needle"), [
    ("vllm:num_requests_running{engine=\"0\"} 3\nvllm:num_requests_waiting{engine=\"0\",model_na", "truncated"),
    ("# TYPE x counter\nx_total 1\nx_total{a=\"b\"} not-a-number\n", "line 3"),
    ("\x00\x01\x02binary\n", "binary"),
    ("<html><body>502 Bad Gateway</body></html>\n", "line 1"),
])
def test_bad_scrapes_raise_a_clear_error(text: str, needle: str) -> None:
    with pytest.raises(ScrapeError) as err:
        parse_metrics(text, 1.0)
    assert needle in str(err.value)


_TOKENS = ["vllm:", "vllm_", "x", "_total", "_bucket", "_sum", "_count", "_created", "{", "}", "=", '"', ",", "le",
           "+Inf", "NaN", "0.5", "-1", "1e9", " ", "\n", "\\", "# TYPE ", "# HELP ", "counter", "histogram", "gauge",
           "engine", "pid", "#"]
_PROMISH = st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), _PROMISH))
def test_random_text_raises_only_scrape_error(text: str) -> None:
    with contextlib.suppress(ScrapeError):
        parse_metrics(text, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=4000))
def test_any_truncation_of_a_real_scrape_is_caught_or_parses(cut: int) -> None:
    text = (FIXTURES / "metrics_0.33_b.txt").read_text()
    piece = text[: len(text) - cut]
    try:
        snap = parse_metrics(piece, 1.0)
    except ScrapeError:
        return
    assert piece.endswith("\n")  # only a cut at a line boundary can parse
    assert snap.timestamp == 1.0
