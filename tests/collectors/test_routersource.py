"""The router as a source: parse its /metrics, derive misrouted share, queue p99, rejections, chunk-gap CV."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from collectors.routersource import (
    RouterScrapeError,
    derive_router_signals,
    itl_cv,
    parse_router_metrics,
    read_router,
)
from router.metrics import RouterMetrics

# Written by hand in the router's exposition format (router/metrics.py), numbers checked by hand.
TEXT_A = """\
# TYPE router_prompt_tokens_checked_total counter
router_prompt_tokens_checked_total 100.0
# TYPE router_misrouted_total counter
router_misrouted_total{direction="short_as_long"} 2.0
router_misrouted_total{direction="long_as_short"} 3.0
# TYPE router_rejections_total counter
router_rejections_total{rule="length_limit"} 4.0
router_rejections_total{rule="queue_full"} 0.0
# TYPE router_queue_time_seconds histogram
router_queue_time_seconds_bucket{le="0.01",route="hot"} 90.0
router_queue_time_seconds_bucket{le="0.1",route="hot"} 99.0
router_queue_time_seconds_bucket{le="+Inf",route="hot"} 100.0
router_queue_time_seconds_sum{route="hot"} 1.0
router_queue_time_seconds_count{route="hot"} 100.0
# TYPE router_stream_chunk_gap_seconds histogram
router_stream_chunk_gap_seconds_bucket{le="0.01",role="hot",upstream="hot"} 10.0
router_stream_chunk_gap_seconds_bucket{le="+Inf",role="hot",upstream="hot"} 10.0
router_stream_chunk_gap_seconds_sum{role="hot",upstream="hot"} 0.1
router_stream_chunk_gap_seconds_count{role="hot",upstream="hot"} 10.0
# TYPE router_stream_chunk_gap_squared_seconds_total counter
router_stream_chunk_gap_squared_seconds_total{role="hot",upstream="hot"} 0.001
# TYPE router_policy_version gauge
router_policy_version 3.0
"""
# 10 s later: 100 more checked, 5 more misrouted; 20 more rejections; 20 gaps: 10 of 5 ms and 10 of 15 ms.
TEXT_B = TEXT_A.replace("checked_total 100.0", "checked_total 200.0") \
    .replace('"long_as_short"} 3.0', '"long_as_short"} 8.0') \
    .replace('"queue_full"} 0.0', '"queue_full"} 20.0') \
    .replace('le="0.01",route="hot"} 90.0', 'le="0.01",route="hot"} 100.0') \
    .replace('le="0.1",route="hot"} 99.0', 'le="0.1",route="hot"} 199.0') \
    .replace('le="+Inf",route="hot"} 100.0', 'le="+Inf",route="hot"} 200.0') \
    .replace('count{route="hot"} 100.0', 'count{route="hot"} 200.0') \
    .replace('le="0.01",role="hot",upstream="hot"} 10.0', 'le="0.01",role="hot",upstream="hot"} 20.0') \
    .replace('le="+Inf",role="hot",upstream="hot"} 10.0', 'le="+Inf",role="hot",upstream="hot"} 30.0') \
    .replace('_sum{role="hot",upstream="hot"} 0.1', '_sum{role="hot",upstream="hot"} 0.3') \
    .replace('_count{role="hot",upstream="hot"} 10.0', '_count{role="hot",upstream="hot"} 30.0') \
    .replace('upstream="hot"} 0.001', 'upstream="hot"} 0.0035')


def test_two_scrapes_give_the_router_signals() -> None:
    a, b = parse_router_metrics(TEXT_A, 100.0), parse_router_metrics(TEXT_B, 110.0)
    assert a.policy_version == 3.0 and a.roles == {"hot": "hot"}
    values, reasons = derive_router_signals(a, b, engine="hot")
    assert values["misrouted_share"] == pytest.approx(5 / 100)
    assert values["rejections_per_s"] == pytest.approx(2.0) and "queue_full 20" in reasons["rejections_per_s"]
    # 100 waits in window: 10 at <= 10 ms, 90 in (10, 100] ms: p99 interpolated at rank 99 -> 0.099 s
    assert values["router_queue_p99_s"] == pytest.approx(0.01 + 0.09 * 89 / 90)
    # gaps in window: 10 x 5 ms + 10 x 15 ms: mean 10 ms, std 5 ms -> CV 0.5 (exact, not from buckets)
    assert values["itl_cv"] == pytest.approx(0.5)
    assert "exact" in reasons["itl_cv"]


def test_one_scrape_and_missing_data_say_why() -> None:
    a = parse_router_metrics(TEXT_A, 100.0)
    values, reasons = derive_router_signals(None, a, engine="cold")
    assert values["rejections_per_s"] is None and "two" in reasons["rejections_per_s"]
    assert values["misrouted_share"] == pytest.approx(0.05) and "since the router started" in \
        reasons["misrouted_share"]
    assert values["itl_cv"] is None and "cold" in reasons["itl_cv"]
    cv, note = itl_cv(None, a, "hot")
    assert cv is not None and math.isclose(cv, 0.0, abs_tol=1e-6) and "one sample" in note
    with pytest.raises(RouterScrapeError):
        parse_router_metrics("vllm:num_requests_running 1\n", 0.0)


def test_parses_what_the_router_exposes() -> None:
    m = RouterMetrics()
    m.checked.inc(4)
    m.misrouted.labels("long_as_short").inc()
    m.reject("length_limit")
    m.queue_time.labels("hot").observe(0.002)
    for g in (0.01, 0.02) * 10:
        m.gap.labels("hot-2", "hot").observe(g)
        m.gap_sq.labels("hot-2", "hot").inc(g * g)
    snap = parse_router_metrics(m.render().decode(), 1.0)
    values, _ = derive_router_signals(None, snap, engine="hot")  # a role matches its upstreams
    assert values["misrouted_share"] == pytest.approx(0.25)
    assert values["itl_cv"] == pytest.approx(0.005 / 0.015)
    assert values["router_queue_p99_s"] is not None


def test_length_limit_and_how_long_it_has_refused_nothing() -> None:
    m = RouterMetrics()
    values, reasons = derive_router_signals(None, parse_router_metrics(m.render().decode(), 1.0))
    assert values["length_limit_tokens"] == 0.0
    assert values["length_limit_idle_s"] is None and "no emergency length limit" in reasons["length_limit_idle_s"]
    m.length_limit.set(8192)
    m.length_limit_idle.set(615.5)
    values, _ = derive_router_signals(None, parse_router_metrics(m.render().decode(), 2.0))
    assert (values["length_limit_tokens"], values["length_limit_idle_s"]) == (8192.0, 615.5)
    # An older router without the gauges: unknown, never "no limit".
    values, reasons = derive_router_signals(None, parse_router_metrics(TEXT_A, 3.0))
    assert values["length_limit_tokens"] is None and values["length_limit_idle_s"] is None
    assert "older router" in reasons["length_limit_idle_s"]


def test_read_router_reports_errors_as_samples() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "ok":
            return httpx.Response(200, text=TEXT_A)
        return httpx.Response(200, text="not metrics {")

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            good = await read_router(c, "http://ok", timeout_s=1, clock=lambda: 5.0)
            bad = await read_router(c, "http://bad", timeout_s=1, clock=lambda: 5.0)
        assert good.error is None and good.data["snapshot"].checked == 100.0
        assert bad.error is not None and "router /metrics" in bad.error

    asyncio.run(main())
