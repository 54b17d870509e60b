"""Read engines through a Prometheus server: instant snapshots, PromQL per version profile, range frames.

The same canonical snapshot as a direct scrape (`snapshot_at`, built with the scrape module's
`snapshot_from_samples`), so the derive step is shared; PromQL for history (`--since`) and alert
rules (`promql`); and pandas frames of a range query (`range_frame`) for baselines.

`prometheus-api-client` is synchronous (requests): call these methods off the event loop
(`asyncio.to_thread`). It is imported lazily, and pandas only by `range_frame`, so `doctor diagnose`
without `--prometheus` pays for neither. Every failure is a `PrometheusError` naming the URL and query.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from collectors.names import PROFILE_NAMES, read_sample_names
from collectors.types import MetricsSnapshot

if TYPE_CHECKING:
    import pandas

# Every sample name the collectors read (both spellings of vLLM's prefix), as literals: Prometheus looks a
# literal alternation up as a set (bench/fleet_read.py: 195 of the sim's 385 series per engine).
FAMILIES_RE = "|".join(re.escape(n) for n in read_sample_names())
_SCRAPE_MARK = "doctor_scrape_time"  # label marking the series that carries the scrape timestamp
_TARGET_LABELS = ("job", "instance")  # added by Prometheus; a direct scrape has neither

V0_PROFILES = frozenset({"0.6", "0.10-v0"})
_QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
_LATENCY_FAMILIES = {"e2e": "e2e_request_latency_seconds", "ttft": "time_to_first_token_seconds",
                     "queue": "request_queue_time_seconds", "prefill": "request_prefill_time_seconds"}
_WINDOW_RE = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


class PrometheusError(Exception):
    """Prometheus could not answer: unreachable, a query it rejected, or nothing matched."""


class PrometheusUnreachable(PrometheusError):
    """Prometheus itself did not answer (refused, timed out, the connection broke): nothing it holds can be read."""


class PromClient(Protocol):
    """The part of `prometheus_api_client.PrometheusConnect` used here (tests substitute it)."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...

    def custom_query_range(self, query: str, start_time: datetime, end_time: datetime, step: str,
                           params: dict[str, Any] | None = None) -> Any: ...


def default_client(url: str, timeout_s: float) -> PromClient:
    """A PrometheusConnect that fails fast when nothing listens and retries a busy server twice."""
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    retry = Retry(total=2, connect=0, read=False, backoff_factor=0.2, status_forcelist=(429, 502, 503, 504),
                  raise_on_status=False)
    client: PromClient = PrometheusConnect(url=url, timeout=timeout_s, retry=retry)
    return client


# ---------------------------------------------------------------------------------------- PromQL

def _matchers(selector: str) -> str:
    """A selector such as `instance="h:8000"` (outer braces optional) as matcher text, or ""."""
    sel = selector.strip()
    if sel.startswith("{") and sel.endswith("}"):
        sel = sel[1:-1].strip()
    return sel


def _family(profile: str, concept: str) -> str:
    """The exposed vLLM base name that carries `concept` in `profile` (see the rename cheat-sheet)."""
    v0 = profile in V0_PROFILES
    if concept == "kv":
        return "gpu_cache_usage_perc" if v0 or profile == "0.8" else "kv_cache_usage_perc"
    if concept == "itl":
        return "time_per_output_token_seconds" if v0 or profile == "0.8" else "inter_token_latency_seconds"
    if concept in ("prefix_cache_hits_total", "prefix_cache_queries_total"):
        return f"gpu_{concept}" if profile == "0.8" else concept
    return concept


def _vllm(base: str, matchers: str, spelling: str) -> str:
    """A vector selector for one vLLM family in the chosen spelling ("either" matches `vllm:` and `vllm_`)."""
    extra = f", {matchers}" if matchers else ""
    if spelling == "either":
        return f'{{__name__=~"vllm[:_]{base}"{extra}}}'
    prefix = "vllm:" if spelling == "colon" else "vllm_"
    return f"{prefix}{base}{{{matchers}}}"


def _plain(name: str, matchers: str, extra: str = "") -> str:
    parts = ", ".join(p for p in (extra, matchers) if p)
    return f"{name}{{{parts}}}"


def promql_signals(profile: str) -> tuple[str, ...]:
    """The signals `promql` can express for a profile (V0 servers export no process_* and, in 0.6, no http_*)."""
    names = ["qps", "prompt_tokens_per_s", "generation_tokens_per_s", "running", "waiting", "kv_cache_usage",
             "prefix_cache_hit_rate", "preemptions_per_s", "abort_rate"]
    names += [f"{q}_{lat}_s" for lat in ("e2e", "ttft", "itl", "queue", "prefill") for q in _QUANTILES]
    if profile != "0.6":
        names.append("error_rate")
    if profile not in V0_PROFILES:
        names += ["uptime_s", "process_cpu", "process_rss_bytes"]
    return tuple(names)


def promql(profile: str, signal: str, selector: str, window: str, *, spelling: str = "either") -> str:
    """PromQL for one canonical signal of one engine (`selector`, e.g. `instance="h:8000"`) over `window`.

    Families follow the version profile (kv_cache_usage_perc vs gpu_cache_usage_perc,
    inter_token_latency_seconds vs time_per_output_token_seconds, prefix_cache_* vs gpu_prefix_cache_*);
    `spelling` is "either" (match `vllm:x` and `vllm_x`), "colon" or "underscore".
    """
    if profile not in PROFILE_NAMES:
        raise ValueError(f"unknown version profile {profile!r}; known: {', '.join(PROFILE_NAMES)}")
    if spelling not in ("either", "colon", "underscore"):
        raise ValueError(f"spelling must be either, colon or underscore, not {spelling!r}")
    if not _WINDOW_RE.match(window):
        raise ValueError(f"window {window!r} is not a Prometheus duration such as 30s, 5m or 1h")
    if signal not in promql_signals(profile):
        raise ValueError(f"no PromQL for signal {signal!r} in profile {profile}; "
                         f"available: {', '.join(promql_signals(profile))}")
    m = _matchers(selector)

    def v(base: str) -> str:
        return _vllm(_family(profile, base), m, spelling)

    def rate(base: str) -> str:
        return f"sum(rate({v(base)}[{window}]))"

    simple_rates = {"qps": "request_success_total", "prompt_tokens_per_s": "prompt_tokens_total",
                    "generation_tokens_per_s": "generation_tokens_total", "preemptions_per_s": "num_preemptions_total"}
    if signal in simple_rates:
        return rate(simple_rates[signal])
    if signal in ("running", "waiting"):
        return f"sum({v('num_requests_' + signal)})"
    if signal == "kv_cache_usage":  # a ratio: the maximum over multiprocess series, never the sum
        return f"max({v('kv')})"
    if signal == "prefix_cache_hit_rate":
        if profile in V0_PROFILES:  # V0's own gauge; negative when prefix caching is off
            return f"max({v('gpu_prefix_cache_hit_rate')} >= 0)"
        return f"{rate('prefix_cache_hits_total')} / {rate('prefix_cache_queries_total')}"
    if signal == "abort_rate":
        aborted = _vllm("request_success_total", ", ".join(p for p in ('finished_reason="abort"', m) if p), spelling)
        return f"(sum(rate({aborted}[{window}])) or vector(0)) / {rate('request_success_total')}"
    if signal == "error_rate":
        api = 'handler=~"/v1/.*"'
        errors = _plain("http_requests_total", m, f'{api}, status="5xx"')
        total = _plain("http_requests_total", m, api)
        return f"(sum(rate({errors}[{window}])) or vector(0)) / sum(rate({total}[{window}]))"
    if signal == "uptime_s":
        return f"time() - max({_plain('process_start_time_seconds', m)})"
    if signal == "process_cpu":
        return f"sum(rate({_plain('process_cpu_seconds_total', m)}[{window}]))"
    if signal == "process_rss_bytes":
        return f"sum({_plain('process_resident_memory_bytes', m)})"
    q, lat = signal.split("_", 1)
    lat = lat.removesuffix("_s")
    base = _family(profile, "itl") if lat == "itl" else _LATENCY_FAMILIES[lat]
    return f"histogram_quantile({_QUANTILES[q]}, sum by (le) (rate({_vllm(base + '_bucket', m, spelling)}[{window}])))"


def snapshot_query(selector: str, by: tuple[str, ...] = _TARGET_LABELS) -> str:
    """One instant query for every family the collectors read, plus the target's scrape time.

    `timestamp()` gives a sample's own time only when applied straight to a selector of one family
    (on any other expression it gives the evaluation time), so the scrape time comes from the first
    family present of: num_requests_running (every vLLM), process_start_time_seconds, http_requests_total.
    The scrape times are kept `by` these labels (per target; a fleet read adds the label it splits on).
    """
    m = _matchers(selector)
    grouping = ", ".join(by)
    extra = f", {m}" if m else ""
    series = f'{{__name__=~"{FAMILIES_RE}"{extra}}}'
    clocks = (f'{{__name__=~"vllm[:_]num_requests_running"{extra}}}', f"process_start_time_seconds{{{m}}}",
              f"http_requests_total{{{m}}}")
    stamp = " or ".join(f"max by ({grouping}) (timestamp({c}))" for c in clocks)
    return f'{series} or label_replace({stamp}, "{_SCRAPE_MARK}", "1", "", "")'


# ---------------------------------------------------------------------------------------- source

def _api_error(exc: BaseException) -> str:
    """The `error` of a Prometheus API answer, from prometheus_api_client's "HTTP Status Code N (b'...')"."""
    text = str(exc)
    found = re.match(r"HTTP Status Code (\d+) \((b(?:'.*'|\".*\"))\)$", text, re.S)
    if not found:
        return text[:300]
    status, detail = found.group(1), found.group(2)
    try:
        body = json.loads(ast.literal_eval(detail))
        detail = str(body.get("error") or body)
    except (ValueError, SyntaxError, TypeError, AttributeError):
        detail = detail[:300]
    return f"HTTP {status}: {detail}"


def _as_float(raw: object) -> float:
    return float(str(raw))  # Prometheus sends "NaN", "+Inf", "1.5e-3" as strings


class PrometheusSource:
    """A Prometheus server's HTTP API as a collector source (synchronous; run it with asyncio.to_thread)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0,
                 client_factory: Callable[[str, float], PromClient] = default_client) -> None:
        url = url.strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", url):
            raise PrometheusError(f"Prometheus URL {url!r} must look like http://host:9090")
        if not timeout_s > 0:
            raise PrometheusError(f"Prometheus timeout must be positive, not {timeout_s!r}")
        self.url = url
        self.timeout_s = timeout_s
        self._factory = client_factory
        self._client: PromClient | None = None

    promql = staticmethod(promql)

    def _connect(self) -> PromClient:
        if self._client is None:
            try:
                self._client = self._factory(self.url, self.timeout_s)
            except ImportError as exc:
                raise PrometheusError(f"the Prometheus source needs prometheus-api-client: {exc}") from None
        return self._client

    def _call(self, query: str, fn: Callable[[PromClient], Any]) -> Any:
        """Run one API call; every failure becomes a PrometheusError naming the URL and the query."""
        import requests
        import urllib3
        from prometheus_api_client.exceptions import PrometheusApiClientException

        client = self._connect()
        where = f"Prometheus at {self.url}"
        try:
            return fn(client)
        except requests.exceptions.Timeout:
            raise PrometheusUnreachable(f"{where} did not answer within {self.timeout_s:g}s (query: {query})") \
                from None
        except requests.exceptions.ConnectionError as exc:
            reason = type(exc).__name__ if "refused" not in str(exc) else "connection refused"
            raise PrometheusUnreachable(f"{where} is unreachable ({reason}) (query: {query})") from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError) as exc:
            raise PrometheusUnreachable(f"{where}: {type(exc).__name__}: {exc} (query: {query})") from None
        except PrometheusApiClientException as exc:
            raise PrometheusError(f"{where} rejected the query: {_api_error(exc)} (query: {query})") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise PrometheusError(f"{where} gave an answer that is not the Prometheus API's "
                                  f"({type(exc).__name__}: {exc}) (query: {query})") from None

    def instant(self, query: str, t: float | None = None, *,
                allow_empty: bool = False) -> list[tuple[dict[str, str], float]]:
        """An instant query (at `t`, unix seconds, or now) as (labels, value) pairs; empty is an error by default."""
        params = {"time": f"{t:.3f}"} if t is not None else None
        result = self._call(query, lambda c: c.custom_query(query, params=params))
        out: list[tuple[dict[str, str], float]] = []
        try:
            for item in result:
                out.append((dict(item["metric"]), _as_float(item["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusError(f"Prometheus at {self.url}: unexpected result shape ({exc}) "
                                  f"(query: {query})") from None
        if not out and not allow_empty:
            at = f" at t={t:.3f}" if t is not None else ""
            raise PrometheusError(f"Prometheus at {self.url}: no series{at} (query: {query}); "
                                  "is the engine scraped, and does the selector match its labels?")
        return out

    def snapshot_at(self, selector: str, t: float) -> MetricsSnapshot:
        """The engine's families at time `t`, mapped like a direct scrape of its /metrics.

        The snapshot's timestamp is the scrape time Prometheus recorded (not `t`), so rates between
        two snapshots use the real interval. The selector must match exactly one scrape target.
        """
        query = snapshot_query(selector)
        return snapshot_of_rows(self.instant(query, t), url=self.url, selector=selector, t=t, query=query)

    def range_frame(self, query: str, start: float | datetime, end: float | datetime,
                    step: str | float) -> pandas.DataFrame:
        """A range query as a wide DataFrame: index = unix seconds, one float column per series.

        Columns are named by the series' labels (`{a="1",b="2"}`), or `value` for a label-less result
        such as an aggregation; gaps are NaN.
        """
        import pandas as pd

        t0, t1 = (_as_datetime(start), _as_datetime(end))
        if t1 < t0:
            raise PrometheusError(f"range end {t1.isoformat()} is before start {t0.isoformat()} (query: {query})")
        step_s = f"{step:g}s" if isinstance(step, int | float) else str(step)
        result = self._call(query, lambda c: c.custom_query_range(query, t0, t1, step_s))
        columns: dict[str, pd.Series] = {}
        try:
            for item in result:
                key = _series_key(item["metric"])
                points = [(float(ts), _as_float(val)) for ts, val in item["values"]]
                columns[key] = pd.Series([p[1] for p in points], index=[p[0] for p in points], dtype=float)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusError(f"Prometheus at {self.url}: unexpected range result ({exc}) "
                                  f"(query: {query})") from None
        if not columns:
            raise PrometheusError(f"Prometheus at {self.url}: no series between {t0.isoformat()} and "
                                  f"{t1.isoformat()} (query: {query})")
        frame = pd.DataFrame(columns).sort_index()
        frame.index.name = "timestamp"
        return frame


def snapshot_of_rows(rows: list[tuple[dict[str, str], float]], *, url: str, selector: str, t: float,
                     query: str) -> MetricsSnapshot:
    """One engine's rows of a snapshot query (its series and its scrape-time marks) as a canonical snapshot."""
    from collectors.scrape import snapshot_from_samples

    stamps = [(labels, value) for labels, value in rows if labels.get(_SCRAPE_MARK) == "1"]
    targets = sorted({"/".join(labels.get(k, "") for k in _TARGET_LABELS) for labels, _ in stamps})
    if not stamps or len(rows) == len(stamps):
        raise PrometheusError(f"Prometheus at {url}: no engine series at t={t:.3f} (query: {query})")
    if len(targets) > 1:
        raise PrometheusError(f"Prometheus at {url}: selector {selector!r} matches {len(targets)} "
                              f"scrape targets ({', '.join(targets)}); select one engine, e.g. by instance")
    samples: list[tuple[str, Mapping[str, str], float]] = []
    for labels, value in rows:
        if labels.get(_SCRAPE_MARK) == "1":
            continue
        name = labels.pop("__name__", "")  # the rows are the caller's own (instant builds them)
        if not name or name.endswith("_created"):
            continue
        for k in _TARGET_LABELS:
            labels.pop(k, None)
        samples.append((name, labels, value))
    return snapshot_from_samples(samples, max(value for _, value in stamps))


def _as_datetime(t: float | datetime) -> datetime:
    if isinstance(t, datetime):
        return t if t.tzinfo else t.replace(tzinfo=UTC)
    if not math.isfinite(t):
        raise PrometheusError(f"time {t!r} is not a finite unix timestamp")
    return datetime.fromtimestamp(t, tz=UTC)


def _series_key(labels: Mapping[str, str]) -> str:
    if not labels:
        return "value"
    name = labels.get("__name__", "")
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


__all__ = ("FAMILIES_RE", "PromClient", "PrometheusError", "PrometheusSource", "default_client",
                          "promql", "promql_signals", "snapshot_of_rows", "snapshot_query")
