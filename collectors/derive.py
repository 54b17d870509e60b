"""Signals from two metrics snapshots: counter rates, gauges and histogram quantiles over the window.

Counter resets (an engine restart: a counter lower than before) never give negative rates: the new
value is taken as the delta since the reset (Prometheus `rate()` semantics) and `reasons["counter_reset"]`
says so. Quantiles follow Prometheus `histogram_quantile` on the bucket deltas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from collectors.quantiles import bucket_cv as _cv
from collectors.quantiles import histogram_quantile, share_at_or_above
from collectors.scrape import engine_count
from collectors.types import SIGNAL_NAMES, EngineConfigView, HistogramData, MetricsSnapshot
from collectors.window import GaugeStats, gauge_stats, pinned_cap

Values = dict[str, float | None]
Reasons = dict[str, str]

# The signals /metrics gives: all of SIGNAL_NAMES but the GPU ones (those come from NVML or dcgm-exporter).
GPU_ONLY: frozenset[str] = frozenset({"dram_utilization", "fb_used_ratio", "memory_growth_ratio", "sm_utilization",
                                      "xid_errors", "xid_last_code", "ecc_dbe_errors"})
METRICS_SIGNALS: tuple[str, ...] = tuple(s for s in SIGNAL_NAMES if s not in GPU_ONLY)
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
LATENCIES: tuple[str, ...] = ("e2e", "ttft", "itl", "queue", "prefill")
ONE_SAMPLE = "one sample: rates need two"
_STATS_OFF = "engine stats disabled (--disable-log-stats): no vllm: metrics exposed"
_GAUGE_NAMES = {"running": "num_requests_running", "waiting": "num_requests_waiting"}
# The window statistics of the gauges: signal -> (gauge, statistic)
WINDOW_GAUGE_SIGNALS: dict[str, tuple[str, str]] = {
    "running_min": ("running", "minimum"), "running_max": ("running", "maximum"),
    "waiting_min": ("waiting", "minimum"), "waiting_mean": ("waiting", "mean"), "waiting_max": ("waiting", "maximum"),
    "kv_cache_usage_mean": ("kv_cache_usage", "mean"), "kv_cache_usage_max": ("kv_cache_usage", "maximum"),
}
# Signals that summarise requests (shares, quantiles): judged only from at least MIN_REQUESTS of them.
MIN_REQUESTS = 10
MIN_TOKENS = 200  # inter-token gaps behind the ITL quantiles and their spread
MIN_REQUESTS_FOR_MEAN = 3  # a mean over long prompts' tokens (prefill time per token) settles with a few of them


def _fmt(x: float) -> str:
    return f"{x:g}"


class _Deriver:
    def __init__(self, prev: MetricsSnapshot | None, cur: MetricsSnapshot, long_tokens: float,
                 very_long_tokens: float, gauge_stats: dict[str, GaugeStats] | None = None,
                 min_requests: int = MIN_REQUESTS) -> None:
        self.gauge_stats = gauge_stats if gauge_stats is not None else _instant_stats(prev, cur)
        self.min_requests = min_requests
        self.observed: dict[str, float] = {}  # signal -> requests (or tokens) behind it
        self.long_tokens = long_tokens
        self.very_long_tokens = very_long_tokens
        self.prev = prev
        self.cur = cur
        self.values: Values = {}
        self.reasons: Reasons = {}
        self.resets: list[str] = []
        self.window = None if prev is None else cur.timestamp - prev.timestamp

    def none(self, name: str, why: str) -> None:
        self.values[name] = None
        self.reasons[name] = why

    def rate_problem(self) -> str | None:
        if self.window is None:
            return ONE_SAMPLE
        if self.window <= 0:
            return f"window length is {_fmt(self.window)} s (samples out of order or repeated): no rates"
        return None

    def delta(self, key: str) -> float | None:
        """Counter increase over the window; None when the counter is in neither snapshot."""
        assert self.prev is not None
        now = self.cur.counters.get(key)
        before = self.prev.counters.get(key)
        if now is None and before is None:
            return None
        if (now is not None and math.isnan(now)) or (before is not None and math.isnan(before)):
            return None
        if now is None:  # the series vanished: a restart that has not re-created it yet
            self.resets.append(f"{key} {_fmt(before or 0.0)} -> absent")
            return 0.0
        if before is None:  # created in the window (V0 creates label children lazily)
            return now
        if now < before:
            self.resets.append(f"{key} {_fmt(before)} -> {_fmt(now)}")
            return now
        return now - before

    def delta_group(self, base: str) -> dict[str, float]:
        """Deltas of every `base{label}` counter present in either snapshot."""
        assert self.prev is not None
        prefix = base + "{"
        keys = {k for k in self.cur.counters if k.startswith(prefix)}
        keys |= {k for k in self.prev.counters if k.startswith(prefix)}
        out: dict[str, float] = {}
        for k in sorted(keys):
            d = self.delta(k)
            if d is not None:
                out[k[len(prefix):-1]] = d
        return out

    def hist_delta(self, name: str) -> HistogramData | None:
        """Bucket deltas over the window (with one sample: the histogram since start)."""
        now = self.cur.histograms.get(name)
        if now is None or self.prev is None:
            return now
        before = self.prev.histograms.get(name)
        if before is None:
            return now
        if before.bounds != now.bounds:
            self.resets.append(f"{name} buckets changed (restart with new bounds)")
            return now
        cum = tuple(a - b for a, b in zip(now.cumulative, before.cumulative, strict=True))
        if now.count < before.count or any(c < 0 for c in cum):
            self.resets.append(f"{name} count {_fmt(before.count)} -> {_fmt(now.count)}")
            return now
        return HistogramData(now.bounds, cum, now.sum - before.sum, now.count - before.count)


def _instant_stats(prev: MetricsSnapshot | None, cur: MetricsSnapshot) -> dict[str, GaugeStats]:
    """Gauge statistics from the two reads alone (when no longer window is given)."""
    return gauge_stats([s for s in (prev, cur) if s is not None])


def _window_gauges(d: _Deriver) -> None:
    """Minimum, mean and maximum of running, waiting and KV usage over the window's reads."""
    stats = d.gauge_stats
    reads = max((g.reads for g in stats.values()), default=0)
    for name, (gauge, stat) in WINDOW_GAUGE_SIGNALS.items():
        g = stats.get(gauge)
        if g is None:
            d.none(name, d.reasons.get(gauge, f"no {gauge} gauge in the window's reads"))
        else:
            d.values[name] = float(getattr(g, stat))
            d.reasons[name] = f"{stat} of {g.reads} reads over the window"
    if reads:
        d.values["gauge_reads"] = float(reads)
    else:
        d.none("gauge_reads", "no gauge read")


def _gauges(d: _Deriver, config: EngineConfigView) -> None:
    cur = d.cur
    start = cur.gauges.get("process_start_time")
    if start is None:
        d.none("uptime_s", "no process_start_time_seconds (multiprocess mode or V0 frontend)")
    else:
        d.values["uptime_s"] = max(0.0, cur.timestamp - start)
    rss = cur.gauges.get("process_rss_bytes")
    if rss is None:
        d.none("process_rss_bytes", "no process_resident_memory_bytes in the scrape (multiprocess mode)")
    else:
        d.values["process_rss_bytes"] = rss
    if not cur.stats_enabled:
        for name in ("running", "waiting", "kv_cache_usage", "gauge_reads", *WINDOW_GAUGE_SIGNALS):
            d.none(name, _STATS_OFF)
        return
    for name, exposed in _GAUGE_NAMES.items():
        value = cur.gauges.get(name)
        if value is None:
            d.none(name, f"vllm:{exposed} not in the scrape")
        else:
            d.values[name] = value
    kv = cur.gauges.get("kv_cache_usage")
    if kv is None:
        d.none("kv_cache_usage", "neither vllm:kv_cache_usage_perc nor vllm:gpu_cache_usage_perc in the scrape")
    else:
        d.values["kv_cache_usage"] = kv
    _window_gauges(d)


def _prefix_v0_gauge(d: _Deriver) -> bool:
    gauge = d.cur.gauges.get("prefix_cache_hit_rate_v0")
    if gauge is None:
        return False
    if gauge < 0:
        d.none("prefix_cache_hit_rate", "prefix caching is off (V0 gauge reports -1)")
    else:
        d.values["prefix_cache_hit_rate"] = gauge
        d.reasons["prefix_cache_hit_rate"] = "V0 gauge vllm:gpu_prefix_cache_hit_rate: block hit rate since start"
    return True


def _rates(d: _Deriver, config: EngineConfigView) -> None:
    window = d.window
    assert window is not None and window > 0
    cur = d.cur
    cpu = d.delta("process_cpu_seconds")
    if cpu is None:
        d.none("process_cpu", "no process_cpu_seconds_total in the scrape (multiprocess mode)")
    else:
        d.values["process_cpu"] = cpu / window
    if not cur.stats_enabled:
        for name in METRICS_SIGNALS:
            if name not in d.values:
                d.none(name, _STATS_OFF)
        return
    finished = d.delta_group("request_success")
    total = sum(finished.values())
    if finished:
        d.values["qps"] = total / window
    else:
        d.none("qps", "no vllm:request_success_total series (no request has finished since start)")
    for name, key, exposed in (
        ("prompt_tokens_per_s", "prompt_tokens", "vllm:prompt_tokens_total"),
        ("generation_tokens_per_s", "generation_tokens", "vllm:generation_tokens_total"),
        ("preemptions_per_s", "preemptions", "vllm:num_preemptions_total"),
    ):
        delta = d.delta(key)
        if delta is None:
            d.none(name, f"{exposed} not in the scrape")
        else:
            d.values[name] = delta / window
    _prefix(d)
    _latencies(d)
    _utilization(d, config)
    _lengths(d)
    _errors(d, finished, total)


def _prefix(d: _Deriver) -> None:
    queries = d.delta("prefix_cache_queries")
    hits = d.delta("prefix_cache_hits")
    if queries is None or hits is None:
        if not _prefix_v0_gauge(d):
            d.none("prefix_cache_hit_rate", "no prefix-cache counters or gauge in the scrape")
        return
    if queries <= 0:
        d.none("prefix_cache_hit_rate", "no prefix-cache lookups in window")
        return
    d.values["prefix_cache_hit_rate"] = min(1.0, hits / queries)
    unit = d.cur.units.get("prefix_cache_queries", "tokens")
    if unit == "blocks":
        d.reasons["prefix_cache_hit_rate"] = "counted in KV blocks (vllm:gpu_prefix_cache_*, 0.8.x), not tokens"


def _latencies(d: _Deriver) -> None:
    for latency in LATENCIES:
        hist = d.hist_delta(latency)
        names = [f"{p}_{latency}_s" for p, _ in QUANTILES]
        if hist is None:
            for name in names:
                d.none(name, f"no {latency} histogram in the scrape (no observation since start?)")
            continue
        if hist.cumulative[-1] <= 0:
            for name in names:
                d.none(name, f"no {latency} observations in window")
            continue
        for name in names:
            d.observed[name] = hist.cumulative[-1]
        for (label, q), name in zip(QUANTILES, names, strict=True):
            got = histogram_quantile(q, hist.bounds, hist.cumulative)
            if got is None:
                d.none(name, f"no {latency} observations in window")
                continue
            value, b = got
            d.values[name] = value
            if math.isinf(hist.bounds[b]):
                d.reasons[name] = (f"{name} is a lower bound: the {label} falls in the +Inf bucket, above the "
                                   f"highest bound {_fmt(value)} s")
            elif label == "p99":
                lower = 0.0 if b == 0 else hist.bounds[b - 1]
                d.reasons[name] = f"{name} within ({_fmt(lower)}, {_fmt(hist.bounds[b])}] s bucket"
    itl = d.hist_delta("itl")
    if itl is None or itl.cumulative[-1] <= 0:
        d.none("itl_cv", "no inter-token latency observations in window")
        return
    d.values["itl_cv"], note = _cv(itl)
    d.reasons["itl_cv"] = note
    d.observed["itl_cv"] = itl.cumulative[-1]


SEQ_CAP_UNKNOWN = ("max_num_seqs unknown: vLLM does not export it; give it in the config (max_num_seqs), run the "
                   "engine with VLLM_SERVER_DEV_MODE=1 for /server_info, or --log with its start-up config line; "
                   "running was not seen held at a cap while requests waited")


def _seq_cap(d: _Deriver, config: EngineConfigView, engines: int) -> tuple[float, str] | None:
    """The sequence cap: declared or read (max_num_seqs), else seen (running held at one value while requests
    wait); never guessed."""
    if config.max_num_seqs:
        cap = float(config.max_num_seqs * engines)
        d.values["seq_cap"] = cap
        d.reasons["seq_cap"] = f"max_num_seqs {config.max_num_seqs}" + (f" x {engines} DP ranks" if engines > 1 else "")
        return cap, d.reasons["seq_cap"]
    seen = pinned_cap(d.gauge_stats, preempting=(d.values.get("preemptions_per_s") or 0.0) > 0)
    if seen is None:
        d.none("seq_cap", SEQ_CAP_UNKNOWN)
        return None
    d.values["seq_cap"] = float(seen[0])
    d.reasons["seq_cap"] = "observed: " + seen[1]
    return float(seen[0]), d.reasons["seq_cap"]


def _utilization(d: _Deriver, config: EngineConfigView) -> None:
    cur = d.cur
    engines = engine_count(cur)
    cache = cur.info.get("cache_config", {})
    seq_cap = _seq_cap(d, config, engines)
    caps: list[tuple[float, str]] = [seq_cap] if seq_cap else []
    blocks = config.num_gpu_blocks or _int(cache.get("num_gpu_blocks"))
    block_size = config.block_size or _int(cache.get("block_size"))
    prompt = d.hist_delta("prompt_len")
    gen = d.hist_delta("generation_len")
    if blocks and block_size and prompt is not None and prompt.count > 0:
        per_request = (prompt.sum + (gen.sum if gen is not None else 0.0)) / prompt.count
        if per_request > 0:
            seqs = blocks * block_size / per_request * engines
            caps.append((seqs, f"KV capacity {_fmt(round(seqs, 1))} sequences ({blocks} blocks x {block_size} "
                               f"tokens / {_fmt(round(per_request, 1))} tokens per request)"))
    if config.router_max_in_flight:
        caps.append((float(config.router_max_in_flight), f"router max in flight {config.router_max_in_flight}"))
    running_stats = d.gauge_stats.get("running")
    running = d.values.get("running")
    if running_stats is not None and running_stats.reads > 1:
        running, how = running_stats.mean, f"mean running of {running_stats.reads} reads"
    else:
        how = "running"
    if running is None:
        d.none("batch_utilization", "no running gauge")
    elif seq_cap is None:
        d.none("batch_utilization", SEQ_CAP_UNKNOWN)
    else:
        cap, why = min(caps, key=lambda c: c[0])
        d.values["batch_utilization"] = running / cap if cap > 0 else None
        d.reasons["batch_utilization"] = f"{how} / {_fmt(round(cap, 1))} ({why})"
    iteration = d.hist_delta("iteration_tokens")
    if d.prev is None:
        d.none("token_budget_utilization", ONE_SAMPLE)
    elif not config.max_num_batched_tokens:
        d.none("token_budget_utilization", "max_num_batched_tokens unknown (config or /server_info)")
    elif iteration is None or iteration.count <= 0:
        d.none("token_budget_utilization", "no engine steps in window (vllm:iteration_tokens_total)")
    else:
        mean = iteration.sum / iteration.count
        d.values["token_budget_utilization"] = mean / config.max_num_batched_tokens
        d.reasons["token_budget_utilization"] = (f"mean {_fmt(round(mean, 1))} tokens per step / "
                                                 f"max_num_batched_tokens {config.max_num_batched_tokens}")


def _int(raw: str | None) -> int | None:
    try:
        value = int(float(raw)) if raw not in (None, "", "None") else None
    except (TypeError, ValueError):
        return None
    return value if value and value > 0 else None


def _lengths(d: _Deriver) -> None:
    prompt = d.hist_delta("prompt_len")
    prefill = d.hist_delta("prefill")
    if prompt is None or prompt.count <= 0 or prompt.cumulative[-1] <= 0:
        for name in ("prefill_s_per_token", "long_prompt_share", "very_long_prompt_share"):
            d.none(name, "no prompts finished in window (vllm:request_prompt_tokens)")
        return
    if prefill is None or prompt.sum <= 0:
        d.none("prefill_s_per_token", "no prefill-time histogram (vllm:request_prefill_time_seconds)")
    else:
        d.values["prefill_s_per_token"] = prefill.sum / prompt.sum
        d.observed["prefill_s_per_token"] = prompt.cumulative[-1]
    for name, threshold in (("long_prompt_share", d.long_tokens), ("very_long_prompt_share", d.very_long_tokens)):
        d.values[name], d.reasons[name] = share_at_or_above(prompt, threshold)
        d.observed[name] = prompt.cumulative[-1]


def _errors(d: _Deriver, finished: dict[str, float], total: float) -> None:
    if total > 0:
        d.values["abort_rate"] = finished.get("abort", 0.0) / total
        d.observed["abort_rate"] = total
    else:
        d.none("abort_rate", "no finished requests in window")
    http = d.delta_group("http_requests")
    http_seen = any(n.startswith("http_requests") for n in d.cur.names_seen)
    shares: list[tuple[float, str]] = []
    why: list[str] = []
    if http_seen:
        http_total = sum(http.values())
        if http_total > 0:
            shares.append((http.get("5xx", 0.0) / http_total, "5xx share of generation requests"))
            d.observed["error_rate"] = http_total
        else:
            why.append("no generation HTTP requests in window")
    assert d.prev is not None
    has_error = "request_success{error}" in d.cur.counters or "request_success{error}" in d.prev.counters
    if has_error and total > 0:
        shares.append((finished.get("error", 0.0) / total, "finished_reason=error share"))
        d.observed["error_rate"] = max(d.observed.get("error_rate", 0.0), total)
    if shares:
        value, how = max(shares, key=lambda s: s[0])
        d.values["error_rate"] = value
        d.reasons["error_rate"] = how + (" (the larger of the two sources)" if len(shares) > 1 else "")
    elif why:
        d.none("error_rate", why[0])
    elif not http_seen:
        d.none("error_rate", "no http_requests_total and no finished_reason=error series (V0 / 0.6)")
    else:
        d.none("error_rate", "no requests in window")


# The canonical series a signal is derived from (for the reason of a signal left unknown by bad input).
_SOURCES: dict[str, tuple[str, ...]] = {
    "uptime_s": ("process_start_time",), "process_rss_bytes": ("process_rss_bytes",),
    "process_cpu": ("process_cpu_seconds",), "qps": ("request_success",), "abort_rate": ("request_success",),
    "prompt_tokens_per_s": ("prompt_tokens",), "generation_tokens_per_s": ("generation_tokens",),
    "preemptions_per_s": ("preemptions",), "prefix_cache_hit_rate": ("prefix_cache_queries", "prefix_cache_hits"),
    "running": ("running",), "waiting": ("waiting",), "kv_cache_usage": ("kv_cache_usage",),
    "batch_utilization": ("running",), "token_budget_utilization": ("iteration_tokens",),
    "long_prompt_share": ("prompt_len",), "very_long_prompt_share": ("prompt_len",),
    "prefill_s_per_token": ("prefill", "prompt_len"), "itl_cv": ("itl",), "error_rate": ("http_requests",),
    **{f"{q}_{h}_s": (h,) for q in ("p50", "p95", "p99") for h in ("e2e", "ttft", "itl", "queue", "prefill")},
    **{f"{g}_{stat}": (g,) for g in ("running", "waiting") for stat in ("min", "max", "mean")},
    **{f"kv_cache_usage_{stat}": ("kv_cache_usage",) for stat in ("mean", "max")},
}


def _bad_input(d: _Deriver) -> None:
    """Readings the scrape rejected (not finite, out of range) leave their signals unknown with the reason; a
    value that came out non-finite anyway (finite inputs that overflow) is unknown too."""
    rejected = {**(d.prev.rejected if d.prev is not None else {}), **d.cur.rejected}
    for name in METRICS_SIGNALS:
        value = d.values.get(name)
        if value is not None and not math.isfinite(value):
            d.none(name, f"came out as {value!r}, not a finite number: the scrape's numbers are out of range")
        elif value is None:
            why = [rejected[s] for s in _SOURCES.get(name, ()) if s in rejected]
            if why:
                d.reasons[name] = "; ".join(why)
    if rejected:
        d.reasons["bad_readings"] = "; ".join(rejected[k] for k in sorted(rejected))


@dataclass(frozen=True)
class Derived:
    """The metrics signals of one window: values (None where unknown), reasons and caveats, and the
    request-based signals built from too few requests to judge (name -> requests behind it)."""

    values: Values
    reasons: Reasons
    weak: dict[str, float] = field(default_factory=dict)


def derive_window(prev: MetricsSnapshot | None, cur: MetricsSnapshot, config: EngineConfigView, *,
                  long_prompt_tokens: int = 5120, very_long_prompt_tokens: int = 8192,
                  gauges: dict[str, GaugeStats] | None = None, resets: Sequence[str] = (),
                  min_requests: int = MIN_REQUESTS) -> Derived:
    """Every metrics signal over (prev, cur]. `gauges`: the gauges over the window's reads (default: the
    two reads alone); `resets`: counter resets a longer window saw between its snapshots."""
    d = _Deriver(prev, cur, long_prompt_tokens, very_long_prompt_tokens, gauges, min_requests)
    d.resets.extend(resets)
    _gauges(d, config)
    problem = d.rate_problem()
    if problem is None:
        _rates(d, config)
    elif cur.stats_enabled and problem == ONE_SAMPLE:
        _prefix_v0_gauge(d)
        _utilization(d, config)
    for name in METRICS_SIGNALS:
        if name not in d.values:
            d.none(name, problem or _STATS_OFF)
    _bad_input(d)
    if d.resets:
        if d.values.get("uptime_s") is None and d.window:
            d.reasons["uptime_s"] += f"; a counter reset shows a restart within the last {_fmt(d.window)} s"
        d.reasons["counter_reset"] = ("counter reset (engine restart?): " + "; ".join(d.resets[:6])
                                      + ": the new value is taken as the increase since the reset")
    weak: dict[str, float] = {}
    for name, n in d.observed.items():
        floor = (MIN_TOKENS if name.endswith("_itl_s") or name == "itl_cv" else
                 MIN_REQUESTS_FOR_MEAN if name == "prefill_s_per_token" else min_requests)
        if d.values.get(name) is not None and n < floor:
            weak[name] = n
            unit = "inter-token gaps" if floor == MIN_TOKENS else "requests"
            d.reasons[name] = (f"from only {_fmt(n)} {unit} in the window (fewer than {floor}): too few to judge; "
                               + d.reasons.get(name, "")).rstrip("; ")
    return Derived({name: d.values[name] for name in METRICS_SIGNALS}, d.reasons, weak)


def derive_metrics_signals(
    prev: MetricsSnapshot | None,
    cur: MetricsSnapshot,
    config: EngineConfigView,
    *,
    long_prompt_tokens: int = 5120,
    very_long_prompt_tokens: int = 8192,
) -> tuple[Values, Reasons]:
    """Every metrics signal over (prev, cur]: values (None where unknown) and reasons/caveats.

    With `prev` None only the gauges are read; rates carry the reason "one sample: rates need two".
    """
    got = derive_window(prev, cur, config, long_prompt_tokens=long_prompt_tokens,
                        very_long_prompt_tokens=very_long_prompt_tokens)
    return got.values, got.reasons


def latest_gauges(cur: MetricsSnapshot, config: EngineConfigView | None = None) -> tuple[Values, Reasons]:
    """What one snapshot gives: gauges (running, waiting, KV usage, uptime); rates None."""
    return derive_metrics_signals(None, cur, config or EngineConfigView())
