"""Signals from two snapshots, checked against values computed by hand from the fixtures.

Every fixture pair is 10 s apart (a at t=1000, b at t=1010). Deltas a -> b, the same in every release:
  request_success +40 (stop, length +8, abort +2 in V1; 0.20+ also error +1), prompt tokens +20000,
  generation tokens +5000, preemptions +3, prefix queries +16000 / hits +4000 tokens (0.8: 1000 / 250 blocks),
  TTFT: 20 in (0.1,0.25], 16 in (0.25,0.5], 3 in (0.5,0.75], 1 in (5,7.5]
  e2e: 10 in (0.8,1], 20 in (1,1.5], 8 in (2.5,5], 2 in (10,15]      (0.6: 1 in (50,60], 1 above 60)
  ITL: 2480 in (0.01,0.025], 2232 in (0.025,0.05], 248 in (0.075,0.1]
  queue: 36 in (0,0.3], 4 in (0.3,0.5];  prefill: 30 in (0,0.3], 10 in (0.3,0.5], sum +8 s
  prompt length: 10 in (200,500], 18 in (500,1000], 4 each in (1000,2000], (2000,5000], (5000,10000]; sum +20000
  generation length sum +5000; iteration tokens: 100 steps, sum +25000
  http /v1/chat/completions: 2xx +38, 4xx +1, 5xx +2 (0.33: 2xx +40, no 4xx/5xx); b gauges: running 12,
  waiting 3, KV 0.42; process_start_time 400, process_cpu +5 s; cache_config 2000 blocks x 16 tokens.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.derive import METRICS_SIGNALS, derive_metrics_signals, histogram_quantile, latest_gauges
from collectors.scrape import parse_metrics
from collectors.types import SIGNAL_NAMES, EngineConfigView, HistogramData, MetricsSnapshot

FIXTURES = Path(__file__).parent / "fixtures"
CONFIG = EngineConfigView(max_num_seqs=256, max_num_batched_tokens=1000)
INF = float("inf")

_ITL_MEAN = 0.5 * 0.0175 + 0.45 * 0.0375 + 0.05 * 0.0875  # bucket midpoints weighted by share = 0.03
_ITL_VAR = 0.5 * (0.0175 - 0.03) ** 2 + 0.45 * (0.0375 - 0.03) ** 2 + 0.05 * (0.0875 - 0.03) ** 2

EXPECTED: dict[str, float | None] = {
    "uptime_s": 1010 - 400,
    "qps": 40 / 10,
    "prompt_tokens_per_s": 20000 / 10,
    "generation_tokens_per_s": 5000 / 10,
    "running": 12,
    "waiting": 3,
    # mean running of the two reads (10, 12) / cap = min(max_num_seqs 256, KV 2000*16 tokens /
    # ((20000+5000)/40 tokens per request) = 51.2)
    "batch_utilization": 11 / 51.2,
    "token_budget_utilization": (25000 / 100) / 1000,
    "kv_cache_usage": 0.42,
    "prefix_cache_hit_rate": 4000 / 16000,
    "preemptions_per_s": 3 / 10,
    "p50_e2e_s": 1 + 0.5 * (20 - 10) / 20,  # rank 20 inside (1, 1.5] holding ranks 10..30
    "p95_e2e_s": 2.5 + 2.5 * (38 - 30) / 8,  # rank 38 = top of (2.5, 5]
    "p99_e2e_s": 10 + 5 * (39.6 - 38) / 2,  # rank 39.6 inside (10, 15]
    "p50_ttft_s": 0.1 + 0.15 * 20 / 20,
    "p95_ttft_s": 0.5 + 0.25 * (38 - 36) / 3,
    "p99_ttft_s": 5 + 2.5 * (39.6 - 39) / 1,
    "p50_itl_s": 0.025,  # rank 2480 = top of (0.01, 0.025]
    "p95_itl_s": 0.05,  # rank 4712 = top of (0.025, 0.05]
    "p99_itl_s": 0.075 + 0.025 * (0.99 * 4960 - 4712) / 248,
    "p50_queue_s": 0.3 * 20 / 36,
    "p95_queue_s": 0.3 + 0.2 * (38 - 36) / 4,
    "p99_queue_s": 0.3 + 0.2 * (39.6 - 36) / 4,
    "p50_prefill_s": 0.3 * 20 / 30,
    "p95_prefill_s": 0.3 + 0.2 * (38 - 30) / 10,
    "p99_prefill_s": 0.3 + 0.2 * (39.6 - 30) / 10,
    "itl_cv": math.sqrt(_ITL_VAR) / _ITL_MEAN,
    "prefill_s_per_token": 8.0 / 20000,
    # prompts < 5120: 36 + 4 * (5120-5000)/5000 interpolated in (5000, 10000]
    "long_prompt_share": (40 - (36 + 4 * 120 / 5000)) / 40,
    "very_long_prompt_share": (40 - (36 + 4 * 3192 / 5000)) / 40,
    "error_rate": 2 / 41,  # 5xx share of generation requests (38 + 1 + 2)
    "abort_rate": 2 / 40,  # `length` is a normal finish
    "process_cpu": 5 / 10,
    "process_rss_bytes": 2.5e9,
}
V0_NO_PROCESS = {"uptime_s": None, "process_cpu": None, "process_rss_bytes": None}
OVERRIDES: dict[str, dict[str, float | None]] = {
    "0.6": {**V0_NO_PROCESS, "p99_e2e_s": 60.0, "prefix_cache_hit_rate": 0.31, "abort_rate": 0.0,
            "error_rate": None},
    "0.8": {}, "0.10": {}, "0.11": {}, "0.12": {},
    "0.20": {},  # 5xx share 2/41 beats finished_reason=error 1/40
    "0.33": {"error_rate": 1 / 40},  # no 5xx; finished_reason=error 1 of 40
}


def pair(name: str) -> tuple[MetricsSnapshot, MetricsSnapshot]:
    a = parse_metrics((FIXTURES / f"metrics_{name}_a.txt").read_text(), 1000.0)
    b = parse_metrics((FIXTURES / f"metrics_{name}_b.txt").read_text(), 1010.0)
    return a, b


def check(values: dict[str, float | None], expected: dict[str, float | None]) -> None:
    wrong = {}
    for name, want in expected.items():
        got = values[name]
        if want is None:
            if got is not None:
                wrong[name] = (got, want)
        elif got is None or got != pytest.approx(want, rel=1e-9, abs=1e-12):
            wrong[name] = (got, want)
    assert not wrong, wrong


@pytest.mark.parametrize("version", list(OVERRIDES))
def test_every_signal_per_release(version: str) -> None:
    values, reasons = derive_metrics_signals(*pair(version), CONFIG)
    assert set(values) == set(METRICS_SIGNALS) and set(METRICS_SIGNALS) <= set(SIGNAL_NAMES)
    check(values, {**EXPECTED, **OVERRIDES[version]})
    assert reasons["p99_ttft_s"] == "p99_ttft_s within (5, 7.5] s bucket"
    assert reasons["p99_e2e_s"] == ("p99_e2e_s within (10, 15] s bucket" if version != "0.6" else
                                    "p99_e2e_s is a lower bound: the p99 falls in the +Inf bucket, above the "
                                    "highest bound 60 s")
    assert "interpolated linearly" in reasons["long_prompt_share"]
    assert "first bound 10 ms" in reasons["itl_cv"]
    assert "counter_reset" not in reasons
    for name, value in values.items():
        assert value is not None or reasons.get(name), name


def test_old_prefix_counters_report_blocks() -> None:
    _, reasons = derive_metrics_signals(*pair("0.8"), CONFIG)
    assert "blocks" in reasons["prefix_cache_hit_rate"]


def test_underscore_spelling() -> None:
    check(derive_metrics_signals(*pair("0.33_underscore"), CONFIG)[0], {**EXPECTED, **OVERRIDES["0.33"]})


def test_custom_buckets() -> None:
    values, reasons = derive_metrics_signals(*pair("0.33_custom"), CONFIG)
    # bounds 0.05 0.2 1 4 16; deltas: 20 in (0.05,0.2], 19 in (0.2,1], 1 in (4,16]
    check(values, {"p50_ttft_s": 0.05 + 0.15 * 20 / 20, "p95_ttft_s": 0.2 + 0.8 * (38 - 20) / 19,
                   "p99_ttft_s": 4 + 12 * (39.6 - 39) / 1})
    assert reasons["p99_ttft_s"] == "p99_ttft_s within (4, 16] s bucket"


def test_multiprocess_scrape() -> None:
    values, _ = derive_metrics_signals(*pair("0.8_mp"), CONFIG)
    check(values, {**EXPECTED, "uptime_s": None, "process_cpu": None, "process_rss_bytes": None})


def test_data_parallel_ranks() -> None:
    values, reasons = derive_metrics_signals(*pair("0.20_dp2"), CONFIG)
    # rank 1 is steady: rates are rank 0's; running 12+4, waiting 3+2, KV max(0.42, 0.2);
    # caps double with 2 ranks: min(512, 2 x 51.2); mean running of the two reads (14, 16)
    check(values, {**EXPECTED, "running": 16, "waiting": 5, "batch_utilization": 15 / 102.4})
    assert "2 DP ranks" not in reasons["batch_utilization"]  # KV capacity binds, not max_num_seqs


def test_batch_utilization_caps() -> None:
    a, b = pair("0.33")
    values, reasons = derive_metrics_signals(a, b, EngineConfigView(max_num_seqs=32, router_max_in_flight=40))
    assert values["batch_utilization"] == pytest.approx(11 / 32) and "max_num_seqs 32" in reasons["batch_utilization"]
    values, _ = derive_metrics_signals(a, b, EngineConfigView(max_num_seqs=64, router_max_in_flight=40))
    assert values["batch_utilization"] == pytest.approx(11 / 40)
    values, reasons = derive_metrics_signals(a, b, EngineConfigView(max_num_seqs=256, num_gpu_blocks=4000,
                                                                    block_size=16))
    assert values["batch_utilization"] == pytest.approx(11 / 102.4)
    assert values["token_budget_utilization"] is None and "max_num_batched_tokens" in reasons[
        "token_budget_utilization"]
    # vLLM does not export max_num_seqs: with only the router's cap or the KV capacity known, the real cap may be
    # lower still, so the utilisation is unknown (it used to be judged against the KV capacity: "under-filled")
    for config in (EngineConfigView(router_max_in_flight=40), EngineConfigView(num_gpu_blocks=4000, block_size=16),
                   EngineConfigView()):
        values, reasons = derive_metrics_signals(a, b, config)
        assert values["batch_utilization"] is None and "max_num_seqs unknown" in reasons["batch_utilization"]


def test_thresholds_at_bucket_bounds() -> None:
    values, reasons = derive_metrics_signals(*pair("0.33"), CONFIG, long_prompt_tokens=5000,
                                             very_long_prompt_tokens=10000)
    assert values["long_prompt_share"] == pytest.approx(4 / 40)
    assert values["very_long_prompt_share"] == pytest.approx(0.0)
    assert "at a bucket bound" in reasons["long_prompt_share"]


def test_counter_reset_never_goes_negative() -> None:
    a, b = pair("0.33")
    # b then a, 10 s later: every counter went down (an engine restart); a's values are the increase.
    later = MetricsSnapshot(1020.0, a.counters, a.gauges, a.histograms, a.info, a.names_seen, a.units)
    values, reasons = derive_metrics_signals(b, later, CONFIG)
    assert "counter_reset" in reasons and "prompt_tokens 120000 -> 100000" in reasons["counter_reset"]
    assert values["prompt_tokens_per_s"] == pytest.approx(100000 / 10)
    assert values["qps"] == pytest.approx((300 + 50 + 10 + 1) / 10)
    assert values["p50_ttft_s"] == pytest.approx(0.04 + 0.02 * 50 / 100)  # a's 100 TTFTs in (0.04, 0.06]
    for name in ("qps", "prompt_tokens_per_s", "generation_tokens_per_s", "preemptions_per_s", "process_cpu"):
        assert values[name] is not None and values[name] >= 0


def test_one_sample_and_bad_windows() -> None:
    _, b = pair("0.33")
    values, reasons = latest_gauges(b, CONFIG)
    assert values["running"] == 12 and values["kv_cache_usage"] == pytest.approx(0.42)
    assert values["uptime_s"] == 610 and values["batch_utilization"] is not None
    assert values["qps"] is None and reasons["qps"] == "one sample: rates need two"
    assert values["p99_ttft_s"] is None
    values, reasons = derive_metrics_signals(b, b, CONFIG)
    assert values["qps"] is None and "window length is 0 s" in reasons["qps"]
    assert values["running"] == 12


def test_idle_window_gives_reasons_not_zeros() -> None:
    a, _ = pair("0.33")
    later = MetricsSnapshot(1010.0, a.counters, a.gauges, a.histograms, a.info, a.names_seen, a.units)
    values, reasons = derive_metrics_signals(a, later, CONFIG)
    assert values["qps"] == 0.0
    assert values["prefix_cache_hit_rate"] is None
    assert reasons["prefix_cache_hit_rate"] == "no prefix-cache lookups in window"
    assert values["p99_ttft_s"] is None and "no ttft observations" in reasons["p99_ttft_s"]
    assert values["abort_rate"] is None


def test_stats_disabled() -> None:
    from sim.exposition import render_metrics
    from sim.profiles import get_profile
    from sim.stats import new_metrics_state

    p = get_profile("0.33")
    text = render_metrics(p, new_metrics_state(p, 8192, 500.0), model_name="m", stats_enabled=False).decode()
    values, reasons = derive_metrics_signals(parse_metrics(text, 1000.0), parse_metrics(text, 1010.0), CONFIG)
    assert values["uptime_s"] == 510 and values["qps"] is None
    assert "stats disabled" in reasons["qps"] and "stats disabled" in reasons["running"]


def test_histogram_quantile_prometheus_semantics() -> None:
    assert histogram_quantile(0.5, (1.0, 2.0, INF), (0.0, 0.0, 0.0)) is None
    assert histogram_quantile(0.5, (1.0, 2.0, INF), (2.0, 4.0, 4.0)) == (1.0, 0)
    assert histogram_quantile(0.99, (1.0, 2.0, INF), (2.0, 4.0, 10.0)) == (2.0, 2)  # +Inf: highest finite bound
    assert histogram_quantile(0.25, (-1.0, 2.0, INF), (1.0, 4.0, 4.0)) == (-1.0, 0)  # first bound <= 0


@st.composite
def histograms(draw: st.DrawFn) -> tuple[tuple[float, ...], tuple[float, ...]]:
    raw = draw(st.lists(st.floats(min_value=1e-4, max_value=1e4), min_size=1, max_size=25, unique=True))
    bounds = (*sorted(raw), INF)
    counts = draw(st.lists(st.integers(0, 1000), min_size=len(bounds), max_size=len(bounds)))
    cum, run = [], 0
    for c in counts:
        run += c
        cum.append(float(run))
    return bounds, tuple(cum)


@settings(max_examples=200, deadline=None)
@given(histograms())
def test_quantiles_lie_in_bounds_and_are_monotonic(h: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    bounds, cum = h
    got = [histogram_quantile(q, bounds, cum) for q in (0.5, 0.95, 0.99)]
    if cum[-1] == 0:
        assert got == [None, None, None]
        return
    values = [g[0] for g in got if g is not None]
    assert len(values) == 3
    assert values[0] <= values[1] <= values[2]
    assert all(0 <= v <= bounds[-2] for v in values)


def _snap(t: float, counters: dict[str, float], hist: tuple[tuple[float, ...], tuple[float, ...]]) -> MetricsSnapshot:
    bounds, cum = hist
    h = HistogramData(bounds, cum, sum(cum), cum[-1])
    return MetricsSnapshot(t, counters, {"running": 1.0}, {"ttft": h, "e2e": h}, {}, frozenset())


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["prompt_tokens", "generation_tokens", "preemptions", "request_success{stop}",
                                        "request_success{abort}", "prefix_cache_queries", "prefix_cache_hits"]),
                       st.floats(0, 1e9), min_size=1),
       st.dictionaries(st.sampled_from(["prompt_tokens", "generation_tokens", "preemptions", "request_success{stop}",
                                        "request_success{abort}", "prefix_cache_queries", "prefix_cache_hits"]),
                       st.floats(0, 1e9), min_size=1),
       histograms(), histograms(), st.floats(0.001, 1e4))
def test_rates_and_shares_never_negative(c1, c2, h1, h2, dt) -> None:  # type: ignore[no-untyped-def]
    values, _ = derive_metrics_signals(_snap(0.0, c1, h1), _snap(dt, c2, h2), CONFIG)
    for name in ("qps", "prompt_tokens_per_s", "generation_tokens_per_s", "preemptions_per_s", "abort_rate",
                 "prefix_cache_hit_rate", "p50_ttft_s", "p99_ttft_s", "p99_e2e_s"):
        v = values[name]
        assert v is None or v >= 0, (name, v)
    for name in ("abort_rate", "prefix_cache_hit_rate"):
        v = values[name]
        assert v is None or v <= 1


def test_signals_agree_with_the_sim_clients_in_virtual_time() -> None:
    from sim.harness import Harness
    from sim.workload import WorkloadSpec, generate

    h = Harness(seed=3)
    h.add_engine("e", ["m", "--max-num-seqs", "32"])
    records = h.load(generate(WorkloadSpec(rate_qps=6, duration_s=60, seed=3, output_median=80)))
    h.run_until(h.start + 20)
    t1, a = h.now, parse_metrics(h.metrics_text("e"), h.now)
    h.run_until(h.start + 50)
    t2, b = h.now, parse_metrics(h.metrics_text("e"), h.now)
    values, reasons = derive_metrics_signals(a, b, EngineConfigView(max_num_seqs=32))
    span = t2 - t1

    def within(t: float | None) -> bool:
        return t is not None and t1 < t <= t2

    assert all(r.tokens == len(r.token_times) for r in records)  # one token per step per request
    finished = sum(1 for r in records if within(r.finished))
    tokens = sum(1 for r in records for t in r.token_times if within(t))
    prompts = sum(r.spec.prompt_tokens for r in records if within(r.first_token))
    in_flight = sum(1 for r in records if r.sent <= t2 and not (r.finished is not None and r.finished <= t2))
    assert finished > 50
    assert values["qps"] == pytest.approx(finished / span, rel=0.02)
    assert values["generation_tokens_per_s"] == pytest.approx(tokens / span, rel=0.02)
    assert values["prompt_tokens_per_s"] == pytest.approx(prompts / span, rel=0.02)
    assert values["running"] is not None and values["waiting"] is not None
    assert values["running"] <= 32
    assert abs(values["running"] + values["waiting"] - in_flight) <= 2  # requests still in the frontend
    ttfts = sorted(r.ttft for r in records if within(r.first_token) and r.ttft is not None)
    client_p99 = ttfts[math.ceil(0.99 * len(ttfts)) - 1]
    lower, upper = (float(x) for x in reasons["p99_ttft_s"].split("(")[1].split("]")[0].split(","))
    assert lower < client_p99 <= upper  # the client's P99 lies in the bucket that bounds the derived P99
    assert lower < values["p99_ttft_s"] <= upper  # type: ignore[operator]
