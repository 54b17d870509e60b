"""The http_* families of prometheus_fastapi_instrumentator's `metrics.default()`, as vLLM serves them.

Inferred, not read (see `sim.exposition`): the instrumentator's excluded handlers are dropped;
request/response size summaries count requests per handler with a 0 byte sum (the state keeps no
sizes); the high-resolution latency histogram is derived from the low-resolution one (each
observation at its bucket's bound, so it under-fills the finer bounds). Children's `_created` use
`state.created`.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.utils import floatToGoString

from sim.exposition_families import le_buckets
from sim.stats import Histogram, MetricsState

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


def http_families(s: MetricsState, created: bool) -> list[Metric]:
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
        lowr.add_metric([method, handler], le_buckets(hist), hist.sum)
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
