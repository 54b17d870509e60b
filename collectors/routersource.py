"""The admission router as a source: its /metrics, and the signals only it can give.

From two scrapes of the router's `router_*` families (see router/metrics.py):

* `misrouted_share`: prompts whose engine-reported token count fell on the other side of the route
  threshold than the router's count, over the prompts it could compare;
* `router_queue_p99_s`: p99 of the admission wait (all routes);
* `rejections_per_s`: requests the router refused (length limit, queue full, no upstream, bad input ...);
* `itl_cv`: coefficient of variation of the gaps between streamed token chunks, per engine, exact
  (the router exports the sum of squared gaps), finer than vLLM's ITL buckets;
* `length_limit_tokens` (0 = none in force) and `length_limit_idle_s`: how long the emergency length limit
  has refused nothing (since its last refusal, or since it was set), from one scrape;
  `length_limit_refusals_total`: the router's counter of length-limit refusals (the doctor's history turns it
  into refusals over a window).

With one scrape, shares and quantiles cover everything since the router started (said in reasons);
rates need two.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from collectors.derive import ONE_SAMPLE, histogram_quantile
from collectors.promtext import families as parse_families
from collectors.types import HistogramData, Sample

Values = dict[str, float | None]
Reasons = dict[str, str]
ROUTER_SIGNALS: tuple[str, ...] = ("misrouted_share", "router_queue_p99_s", "rejections_per_s", "itl_cv",
                                   "length_limit_tokens", "length_limit_idle_s", "length_limit_refusals_total")
MAX_SCRAPE_BYTES = 8 * 1024 * 1024
MIN_GAPS = 10


class RouterScrapeError(ValueError):
    """A /metrics body that is not the router's Prometheus text."""


@dataclass(frozen=True)
class GapStats:
    """Streamed chunk gaps of one upstream: count, sum and sum of squares (seconds)."""

    count: float
    total: float
    squares: float


@dataclass(frozen=True)
class RouterSnapshot:
    timestamp: float
    checked: float
    misrouted: float
    rejections: Mapping[str, float]
    queue: HistogramData | None
    gaps: Mapping[str, GapStats]  # by upstream name
    roles: Mapping[str, str]  # upstream name -> role
    policy_version: float | None = None
    in_flight: Mapping[str, float] = field(default_factory=dict)
    length_limit_tokens: float | None = None  # None: an older router without the gauge
    length_limit_idle_s: float | None = None


def _bound(raw: str | None) -> float | None:
    """A bucket's `le` label as a number (None when missing or not a number)."""
    try:
        return None if raw is None else float(raw)
    except ValueError:
        return None


def parse_router_metrics(text: str, timestamp: float) -> RouterSnapshot:
    """The router_* families of one scrape; RouterScrapeError when the text is not the router's."""
    try:
        families = parse_families(text)
    except (ValueError, TypeError, IndexError) as exc:
        raise RouterScrapeError(f"not Prometheus text: {exc}") from None
    if not any(f.name.startswith("router_") for f in families):
        raise RouterScrapeError("no router_* metrics: is this the admission router's /metrics?")
    checked = misrouted = 0.0
    rejections: dict[str, float] = {}
    buckets: dict[float, float] = {}
    q_sum = q_count = 0.0
    count: dict[str, float] = {}
    total: dict[str, float] = {}
    squares: dict[str, float] = {}
    roles: dict[str, str] = {}
    in_flight: dict[str, float] = {}
    version: float | None = None
    limit: float | None = None
    limit_idle: float | None = None
    for fam in families:
        for s in fam.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if name.endswith("_created") or not math.isfinite(value):  # a non-finite value is bad input: left out
                continue
            up = labels.get("upstream", "")
            if up and "role" in labels:
                roles[up] = labels["role"]
            if name == "router_prompt_tokens_checked_total":
                checked += value
            elif name == "router_misrouted_total":
                misrouted += value
            elif name == "router_rejections_total":
                rejections[labels.get("rule", "")] = rejections.get(labels.get("rule", ""), 0.0) + value
            elif name == "router_queue_time_seconds_bucket":
                le = _bound(labels.get("le"))
                if le is not None:
                    buckets[le] = buckets.get(le, 0.0) + value
            elif name == "router_queue_time_seconds_sum":
                q_sum += value
            elif name == "router_queue_time_seconds_count":
                q_count += value
            elif name == "router_stream_chunk_gap_seconds_count":
                count[up] = count.get(up, 0.0) + value
            elif name == "router_stream_chunk_gap_seconds_sum":
                total[up] = total.get(up, 0.0) + value
            elif name == "router_stream_chunk_gap_squared_seconds_total":
                squares[up] = squares.get(up, 0.0) + value
            elif name == "router_policy_version":
                version = value
            elif name == "router_in_flight":
                in_flight[up] = value
            elif name == "router_length_limit_tokens":
                limit = value
            elif name == "router_length_limit_idle_seconds":
                limit_idle = value
    queue = None
    if buckets:
        bounds = tuple(sorted(buckets))
        queue = HistogramData(bounds, tuple(buckets[b] for b in bounds), q_sum, q_count)
    gaps = {u: GapStats(count.get(u, 0.0), total.get(u, 0.0), squares.get(u, 0.0)) for u in count}
    return RouterSnapshot(timestamp, checked, misrouted, rejections, queue, gaps, roles, version, in_flight,
                          limit, limit_idle)


def _gap_delta(prev: RouterSnapshot | None, cur: RouterSnapshot, names: list[str]) -> GapStats:
    n = t = sq = 0.0
    for u in names:
        now = cur.gaps.get(u)
        if now is None:
            continue
        before = prev.gaps.get(u) if prev is not None else None
        if before is None or now.count < before.count:  # new, or the router restarted
            before = GapStats(0.0, 0.0, 0.0)
        n += now.count - before.count
        t += now.total - before.total
        sq += now.squares - before.squares
    return GapStats(n, t, sq)


def itl_cv(prev: RouterSnapshot | None, cur: RouterSnapshot, engine: str | None = None) -> tuple[float | None, str]:
    """CV of streamed chunk gaps for `engine` (an upstream name, or a role: all its upstreams; None: all)."""
    if engine is None:
        names = list(cur.gaps)
    else:
        names = [u for u in cur.gaps if u == engine] or [u for u in cur.gaps if cur.roles.get(u) == engine]
    if not names:
        return None, f"the router has streamed nothing from {engine or 'any engine'} yet"
    g = _gap_delta(prev, cur, names)
    if g.count < MIN_GAPS:
        return None, f"{g.count:g} streamed chunk gaps in window (need {MIN_GAPS})"
    mean = g.total / g.count
    if mean <= 0:
        return None, "streamed chunk gaps sum to zero"
    var = max(0.0, g.squares / g.count - mean * mean)
    note = f"from {g.count:g} streamed chunk gaps seen by the router (mean {mean * 1000:.2f} ms), exact"
    if prev is None:
        note += "; since the router started (one sample)"
    return math.sqrt(var) / mean, note


def derive_router_signals(prev: RouterSnapshot | None, cur: RouterSnapshot,
                          engine: str | None = None) -> tuple[Values, Reasons]:
    """misrouted_share, router_queue_p99_s, rejections_per_s, itl_cv (for `engine`, see itl_cv)."""
    values: Values = {}
    reasons: Reasons = {}
    since_start = prev is None or cur.checked < prev.checked  # one sample, or a router restart
    checked = cur.checked - (0.0 if since_start or prev is None else prev.checked)
    misrouted = cur.misrouted - (0.0 if since_start or prev is None else prev.misrouted)
    if checked <= 0:
        values["misrouted_share"] = None
        reasons["misrouted_share"] = ("no response reported usage.prompt_tokens in window (streams without "
                                      "stream_options.include_usage are not checked)")
    else:
        values["misrouted_share"] = misrouted / checked
        reasons["misrouted_share"] = f"{misrouted:g} of {checked:g} checked prompts" + \
            (" since the router started" if since_start else "")
    _queue(prev, cur, values, reasons)
    if prev is None:
        values["rejections_per_s"] = None
        reasons["rejections_per_s"] = ONE_SAMPLE
    else:
        window = cur.timestamp - prev.timestamp
        if window <= 0:
            values["rejections_per_s"] = None
            reasons["rejections_per_s"] = f"window length is {window:g} s: no rates"
        else:
            parts = {r: v - prev.rejections.get(r, 0.0) if v >= prev.rejections.get(r, 0.0) else v
                     for r, v in cur.rejections.items()}
            values["rejections_per_s"] = sum(parts.values()) / window
            top = ", ".join(f"{r} {v:g}" for r, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v > 0)
            reasons["rejections_per_s"] = f"by rule: {top}" if top else "no rejections in window"
    cv, note = itl_cv(prev, cur, engine)
    values["itl_cv"] = cv
    reasons["itl_cv"] = note
    _length_limit(cur, values, reasons)
    return values, reasons


def _length_limit(cur: RouterSnapshot, values: Values, reasons: Reasons) -> None:
    """The emergency length limit in force (0 = none) and how long it has refused nothing."""
    values["length_limit_tokens"] = cur.length_limit_tokens
    values["length_limit_refusals_total"] = cur.rejections.get("length_limit")
    if values["length_limit_refusals_total"] is None:
        reasons["length_limit_refusals_total"] = "the router exports no router_rejections_total{rule=\"length_limit\"}"
    if cur.length_limit_tokens is None:
        reasons["length_limit_tokens"] = "the router exports no router_length_limit_tokens"
    if cur.length_limit_tokens is None or cur.length_limit_idle_s is None:
        values["length_limit_idle_s"] = None
        reasons["length_limit_idle_s"] = "the router exports no router_length_limit_idle_seconds (older router)"
    elif cur.length_limit_tokens <= 0:
        values["length_limit_idle_s"] = None
        reasons["length_limit_idle_s"] = "no emergency length limit in force"
    else:
        values["length_limit_idle_s"] = cur.length_limit_idle_s
        reasons["length_limit_idle_s"] = "since the limit last refused a request, or since it was set"



def _queue(prev: RouterSnapshot | None, cur: RouterSnapshot, values: Values, reasons: Reasons) -> None:
    h = cur.queue
    if h is None:
        values["router_queue_p99_s"] = None
        reasons["router_queue_p99_s"] = "no router_queue_time_seconds observations yet"
        return
    p = prev.queue if prev is not None else None
    if p is not None and p.bounds == h.bounds and p.count <= h.count:
        h = HistogramData(h.bounds, tuple(a - b for a, b in zip(h.cumulative, p.cumulative, strict=True)),
                          h.sum - p.sum, h.count - p.count)
    got = histogram_quantile(0.99, h.bounds, h.cumulative)
    if got is None:
        values["router_queue_p99_s"] = None
        reasons["router_queue_p99_s"] = "no requests admitted in window"
        return
    value, b = got
    values["router_queue_p99_s"] = value
    if math.isinf(h.bounds[b]):
        reasons["router_queue_p99_s"] = f"a lower bound: p99 is in the +Inf bucket (above {value:g} s)"
    else:
        lower = 0.0 if b == 0 else h.bounds[b - 1]
        reasons["router_queue_p99_s"] = f"within ({lower:g}, {h.bounds[b]:g}] s bucket"


async def read_router(client: httpx.AsyncClient, url: str, *, timeout_s: float,
                      clock: Callable[[], float] = time.time) -> Sample:
    """GET the router's /metrics: a Sample(source="router") with data["snapshot"], or its error."""
    try:
        r = await client.get(url.rstrip("/") + "/metrics", timeout=timeout_s)
    except (httpx.HTTPError, OSError) as exc:
        return Sample("router", "router", clock(), error=f"router /metrics: {type(exc).__name__}: {exc}")
    if r.status_code != 200:
        return Sample("router", "router", clock(), error=f"router /metrics answered HTTP {r.status_code}")
    if len(r.content) > MAX_SCRAPE_BYTES:
        return Sample("router", "router", clock(), error="router /metrics is larger than 8 MiB")
    now = clock()
    try:
        snap = parse_router_metrics(r.text, now)
    except RouterScrapeError as exc:
        return Sample("router", "router", now, error=f"router /metrics could not be parsed: {exc}")
    return Sample("router", "router", now, data={"snapshot": snap})
