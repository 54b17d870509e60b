"""The table behind `doctor rules`: one PromQL condition per playbook (and alert name), with the playbooks' thresholds.

Each `RuleSpec` names its playbook, the alert, an expression builder and the thresholds it reads by the playbook's
own parameter names (`params`, valued from the playbook's defaults) or its own (`rule_params`). Expressions use
`collectors.promsource.promql` per version profile, with every aggregation kept `by` the labels that identify one
engine, so each engine alerts alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from collectors.promsource import promql

DEFAULT_SELECTOR = 'job="vllm"'


class Unavailable(Exception):
    """The rule cannot be expressed for these options (the message says why)."""


@dataclass(frozen=True)
class Options:
    """What the rules are generated for."""

    profile: str = "0.33"
    selector: str = DEFAULT_SELECTOR
    hot_selector: str | None = None  # engines with the hot role (default: `selector`)
    cold_selector: str | None = None  # engines with the cold role (default: `selector`)
    templates_selector: str | None = None  # engines with prompt templates configured (default: hot)
    gpu_selector: str = ""  # dcgm-exporter series (usually another job)
    window: str = "5m"
    spelling: str = "either"
    by: tuple[str, ...] = ("job", "instance")
    slo: Mapping[str, float] = field(default_factory=dict)  # p99_ttft_s, p99_e2e_s
    max_num_seqs: int | None = None
    max_model_len: int = 32768
    router_selector: str = 'job="router"'  # the serving router's own /metrics
    runbook_base: str = ""
    fatal_xids: tuple[int, ...] = ()  # playbooks.gpu_fault.FATAL_XIDS (doctor.rules fills it in)


def strip_braces(selector: str) -> str:
    sel = selector.strip()
    return sel[1:-1].strip() if sel.startswith("{") and sel.endswith("}") else sel


def num(value: float) -> str:
    """A threshold as PromQL writes it (no trailing .0)."""
    return str(int(value)) if float(value).is_integer() else f"{value:.10g}"


def duration(seconds: float) -> str:
    """Seconds as a Prometheus duration (1h, 5m, 90s)."""
    s = round(seconds)
    if s <= 0:
        return "0s"
    for unit, size in (("h", 3600), ("m", 60)):
        if s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def le_label(bound: float) -> str:
    """A bucket bound as prometheus_client (and so vLLM) writes the `le` label."""
    from prometheus_client.utils import floatToGoString

    return str(floatToGoString(float(bound)))


class Ctx:
    """PromQL building blocks for one rule: signals grouped per engine, thresholds by name."""

    def __init__(self, opts: Options, params: Mapping[str, float], role: str | None) -> None:
        self.opts = opts
        self.params = params
        sel = opts.selector
        hot = opts.hot_selector if opts.hot_selector is not None else sel
        if role == "hot":
            sel = hot
        elif role == "cold":
            sel = opts.cold_selector if opts.cold_selector is not None else sel
        elif role == "templates":
            sel = opts.templates_selector if opts.templates_selector is not None else hot
        self.matchers = strip_braces(sel)
        self.group = ", ".join(opts.by)

    def p(self, name: str) -> str:
        return num(self.params[name])

    def s(self, signal: str) -> str:
        """One canonical signal per engine: promsource's PromQL with aggregations kept `by` the engine labels."""
        try:
            expr = promql(self.opts.profile, signal, self.matchers, self.opts.window, spelling=self.opts.spelling)
        except ValueError as exc:
            raise Unavailable(str(exc).split("; available")[0]) from None
        g = self.group
        expr = expr.replace("sum by (le) (", f"sum by (le, {g}) (")
        expr = re.sub(r"\b(sum|max)\(", rf"\1 by ({g}) (", expr)
        return expr.replace(" or vector(0)", "")  # no abort/5xx series: nothing to alert on

    def v(self, base: str, extra: str = "") -> str:
        """A vector selector for a vLLM family in the chosen spelling, with this rule's matchers."""
        parts = ", ".join(p for p in (extra, self.matchers) if p)
        if self.opts.spelling == "either":
            return f'{{__name__=~"vllm[:_]{base}"' + (f", {parts}" if parts else "") + "}"
        prefix = "vllm:" if self.opts.spelling == "colon" else "vllm_"
        return f"{prefix}{base}{{{parts}}}"

    def rate_sum(self, base: str, extra: str = "") -> str:
        return f"sum by ({self.group}) (rate({self.v(base, extra)}[{self.opts.window}]))"

    def plain(self, name: str) -> str:
        return f"{name}{{{self.matchers}}}" if self.matchers else name

    def gpu(self, name: str) -> str:
        m = strip_braces(self.opts.gpu_selector)
        return f"{name}{{{m}}}" if m else name

    def baseline(self, expr: str, window_s: float, exclude_s: float) -> str:
        """The mean of `expr` over `window_s`, leaving out the last `exclude_s` (a subquery)."""
        return f"avg_over_time(({expr})[{duration(window_s)}:1m] offset {duration(exclude_s)})"


# ---------------------------------------------------------------------------------------- expressions

def _engine_down(c: Ctx) -> str:
    return f"{c.plain('up')} == 0"


def _router_down(c: Ctx) -> str:
    m = strip_braces(c.opts.router_selector)
    return f"up{{{m}}} == 0" if m else "up == 0"


def _gpu_xid(c: Ctx) -> str:
    xid = c.gpu("DCGM_FI_DEV_XID_ERRORS")
    return "\nor ".join(f"{xid} == {code}" for code in sorted(c.opts.fatal_xids))


def _gpu_ecc(c: Ctx) -> str:
    return f"{c.gpu('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL')} > {c.p('ecc_dbe_errors')}"


def _engine_stalled(c: Ctx) -> str:
    return (f"{c.s('generation_tokens_per_s')} <= {c.p('generation_tokens_per_s')}\n"
            f"and {c.s('qps')} <= {c.p('qps')}\n"
            f"and ({c.s('waiting')} > {c.p('waiting')} or {c.s('running')} > {c.p('running')})\n"
            f"and on ({c.group}) {c.plain('up')} == 1")


def _error_rate(c: Ctx) -> str:
    return f"{c.s('error_rate')} > {c.p('error_ratio')}"


def _abort_rate(c: Ctx) -> str:
    enough = num(c.params["min_requests"] / _seconds(c.opts.window))
    return f"{c.s('abort_rate')} > {c.p('abort_ratio')}\nand {c.s('qps')} >= {enough}"


def _kv_pressure(c: Ctx) -> str:
    return (f"{c.s('kv_cache_usage')} > {c.p('kv_usage_ratio')}\n"
            f"and ({c.s('preemptions_per_s')} > {c.p('preemptions_per_s')}\nor {c.s('waiting')} > {c.p('waiting')})")


# SLO keys (the doctor config's [engines.slo], p99_spike's SLO_SIGNALS) -> the signal each bounds.
SLO_SIGNALS: dict[str, str] = {
    "p99_ttft_s": "p99_ttft_s", "p95_ttft_s": "p95_ttft_s", "p99_e2e_s": "p99_e2e_s", "p95_e2e_s": "p95_e2e_s",
    "p95_tpot_s": "p95_itl_s", "p95_itl_s": "p95_itl_s", "p99_tpot_s": "p99_itl_s", "p99_itl_s": "p99_itl_s",
}


def _slo(keys: tuple[str, ...]) -> Callable[[Ctx], str]:
    def expr(c: Ctx) -> str:
        given = [k for k in keys if k in c.opts.slo]
        if not given:
            raise Unavailable(f"no SLO given; pass --slo {keys[0]}=SECONDS (the doctor reads [engines.slo])")
        return "\nor ".join(f"{c.s(SLO_SIGNALS[k])} > {num(c.opts.slo[k])}" for k in given)
    return expr


def _p99_baseline(c: Ctx) -> str:
    w, ex, r = c.params["baseline_window_s"], c.params["baseline_exclude_recent_s"], c.p("baseline_factor_ratio")
    return "\nor ".join(f"(\n  {c.s(sig)} > {r} * {c.baseline(c.s(sig), w, ex)}\n"
                        f"  and {c.s(sig)} >= {c.p('baseline_min_s')}\n)" for sig in ("p99_e2e_s", "p99_ttft_s"))


def _queue_waiting(c: Ctx) -> str:
    return f"{c.s('waiting')} > {c.p('waiting')}"


def _queue_time(c: Ctx) -> str:
    return f"{c.s('p95_queue_s')} >= {c.p('p95_queue_s')}"


def _prefill_per_token(c: Ctx) -> str:
    per_token = f"{c.rate_sum('request_prefill_time_seconds_sum')}\n/ {c.rate_sum('request_prompt_tokens_sum')}"
    return f"{per_token}\n> {c.p('prefill_s_per_token')}"


def _prefill_p99(c: Ctx) -> str:
    return f"{c.s('p99_prefill_s')} > {c.p('p99_prefill_s')}"


def _misrouted(c: Ctx) -> str:
    m = strip_braces(c.opts.router_selector)
    sel = f"{{{m}}}" if m else ""
    return (f"sum by ({c.group}) (rate(router_misrouted_total{sel}[{c.opts.window}]))\n"
            f"/ sum by ({c.group}) (rate(router_prompt_tokens_checked_total{sel}[{c.opts.window}]))\n"
            f"> {c.p('misrouted_ratio')}")


def _long_prompt_share(c: Ctx) -> str:
    """Share of prompts >= the route threshold, interpolated inside vLLM's 1-2-5 prompt-length buckets."""
    from sim.profiles import request_token_buckets

    threshold = c.params["route_threshold_tokens"]
    bounds = request_token_buckets(c.opts.max_model_len)
    lower = max((b for b in bounds if b <= threshold), default=0)
    upper = min((b for b in bounds if b > threshold), default=math.inf)
    total = c.rate_sum("request_prompt_tokens_count")

    def cum(bound: float) -> str:
        return total if math.isinf(bound) else c.rate_sum("request_prompt_tokens_bucket", f'le="{le_label(bound)}"')

    if threshold == lower or math.isinf(upper):
        below = cum(lower) if lower else "0"
    elif lower == 0:
        below = f"{cum(upper)} * {num(threshold / upper)}"
    else:
        below = f"({cum(lower)} + ({cum(upper)} - {cum(lower)}) * {num((threshold - lower) / (upper - lower))})"
    return f"1 - {below} / {total}\n> {c.p('long_prompt_ratio')}"


def _hot_decode_jitter(c: Ctx) -> str:
    """itl_cv as the collectors estimate it: the spread of bucket midpoints (+Inf counted at the top bound)."""
    from sim.profiles import PROFILES

    profile = PROFILES[c.opts.profile]
    base = "inter_token_latency_seconds" if profile.itl_histogram else "time_per_output_token_seconds"
    bounds = profile.itl_buckets
    mids = [(lo + hi) / 2 for lo, hi in zip((0.0, *bounds[:-1]), bounds, strict=True)] + [bounds[-1]]
    count = c.rate_sum(f"{base}_count")

    def moment(power: int) -> str:
        # sum_i n_i m_i^k = sum_i cum_i (m_i^k - m_(i+1)^k) + count m_top^k, over cumulative bucket counts
        terms = [f"{num(mids[i] ** power - mids[i + 1] ** power)} * "
                 + c.rate_sum(f"{base}_bucket", 'le="' + le_label(b) + '"') for i, b in enumerate(bounds)]
        terms.append(f"{num(mids[-1] ** power)} * {count}")
        return "(\n    " + "\n  + ".join(terms) + "\n) / " + count

    mean, second = moment(1), moment(2)
    return f"sqrt(clamp_min(\n  {second}\n  - ({mean}) ^ 2, 0)\n) / ({mean})\n> {c.p('itl_cv_ratio')}"


def _memory_fragmentation(c: Ctx) -> str:
    fb = c.gpu("DCGM_FI_DEV_FB_USED")
    w = duration(c.params["footprint_window_s"])
    return f"{fb} / (min_over_time({fb}[{w}]) > {c.p('min_footprint_mib')}) - 1\n> {c.p('memory_growth_ratio')}"


def _throughput_drop(c: Ctx) -> str:
    w, ex, keep = c.params["baseline_window_s"], c.params["baseline_exclude_recent_s"], f"(1 - {c.p('drop_ratio')})"
    tokens, qps = c.s("generation_tokens_per_s"), c.s("qps")
    base = c.baseline(tokens, w, ex)
    return (f"{tokens} < {keep} * {base}\nand {base} > {c.p('min_baseline_tokens_per_s')}\n"
            f"and ({c.s('waiting')} > 0 or {qps} >= {keep} * {c.baseline(qps, w, ex)})")


def _capacity_scale_out(c: Ctx) -> str:
    qps = f"{c.s('qps')} > {c.p('qps')}"
    if not c.opts.max_num_seqs:
        return qps  # sequence-slot saturation needs max_num_seqs, which vLLM does not export
    slots = (f"{c.s('running')} / {c.opts.max_num_seqs} >= {c.p('slots_saturated_ratio')}\n"
             f"  and {c.s('waiting')} > {c.p('waiting')}\n  and {c.s('kv_cache_usage')} < {c.p('kv_headroom_ratio')}")
    return f"{qps}\nor (\n  {slots}\n)"


def _prefix_cache_miss(c: Ctx) -> str:
    return f"{c.s('prefix_cache_hit_rate')} < {c.p('prefix_hit_ratio')}"


def _api_server_cpu_bound(c: Ctx) -> str:
    return f"{c.s('process_cpu')} >= {c.p('process_cpu_cores')}"


def _batch_underutilized(c: Ctx) -> str:
    if not c.opts.max_num_seqs:
        raise Unavailable("vLLM does not export the batch cap (max_num_seqs); pass --max-num-seqs N")
    return (f"{c.s('running')} / {c.opts.max_num_seqs} < {c.p('batch_utilization_ratio')}\n"
            f"and {c.s('waiting')} > {c.p('waiting')}\nand {c.s('kv_cache_usage')} < {c.p('kv_usage_ratio')}")


def _cold_start(c: Ctx) -> str:
    ttft = c.s("p99_ttft_s")
    base = c.baseline(ttft, c.params["baseline_window_s"], c.params["baseline_exclude_recent_s"])
    return (f"{c.s('uptime_s')} < {c.p('recent_uptime_s')}\n"
            f"and (\n  {ttft} > {c.p('ttft_baseline_factor')} * {base}\n"
            f"  or ({ttft} > {c.p('ttft_absolute_s')} unless {base})\n)")


def _replica_imbalance(c: Ctx) -> str:
    """Running or requests/s above `imbalance_factor` x the mean of the other engines of the same job."""
    branches = []
    for signal in ("running", "qps"):
        x = c.s(signal)
        others = f"(sum by (job) ({x}) - on (job) group_right () {x})\n    / on (job) group_left () " \
                 f"(count by (job) ({x}) - 1)"
        branches.append(f"{x}\n  > {c.p('imbalance_factor')} * (\n    {others}\n  )")
    loaded = (f"max by (job) ({c.s('running')}) >= {c.p('loaded_running')}\n"
              f"  or max by (job) ({c.s('qps')}) >= {c.p('loaded_qps')}")
    return f"(\n  {branches[0]}\nor\n  {branches[1]}\n)\nand on (job) (\n  {loaded}\n)"


def _seconds(window: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", window))


# ---------------------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class RuleSpec:
    """One alerting rule for one playbook. `params` name the playbook's parameters it reads (their values are
    the playbook's defaults: one source); `rule_params` are the rule's own."""

    playbook: str
    alert: str
    expr: Callable[[Ctx], str]
    summary: str
    description: str  # %(name)s placeholders are thresholds
    severity: str = "warning"
    for_s: float = 0.0
    params: tuple[str, ...] = ()  # the playbook's own parameters the rule reads (from its defaults)
    rule_params: Mapping[str, float] = field(default_factory=dict)
    role: str | None = None
    alert_index: int = 0  # which of the playbook's `alerts` names this rule
    min_for_s: float = 0.0
    fixed_severity: bool = False  # the rule's own severity, not the playbook's
    note: str = ""


ON = "{{ $labels.instance }}"
GPU = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}"
VAL = "{{ $value | humanize }}"
PCT = "{{ $value | humanizePercentage }}"
RAW = '{{ printf "%%.3g" $value }}'  # %% is escaped: descriptions go through %-formatting

RULES: tuple[RuleSpec, ...] = (
    RuleSpec("engine_down", "VllmEngineDown", _engine_down, f"vLLM engine {ON} is down",
             "Prometheus cannot scrape the engine's /metrics (up == 0): the API server is gone or hung.",
             "critical", min_for_s=60.0, note="for: at least 1m (the playbook's is 0): one failed scrape is no outage"),
    RuleSpec("router_down", "RouterDown", _router_down, f"Router {ON} is down",
             "Prometheus cannot scrape the serving router's /metrics (up == 0): requests sent through it fail.",
             "critical", min_for_s=60.0,
             note="from the serving router's scrape (--router-selector); for: at least 1m, as for an engine"),
    RuleSpec("gpu_fault", "VllmGpuXidError", _gpu_xid, f"{GPU}: fatal Xid {VAL}",
             "dcgm-exporter's last Xid is of a fatal class: the GPU needs a reset or replacement.",
             "critical", params=("xid_errors",), fixed_severity=True,
             note="DCGM_FI_DEV_XID_ERRORS is the last Xid code; fatal classes as in playbooks/gpu_fault.py"),
    RuleSpec("gpu_fault", "VllmGpuEccDoubleBit", _gpu_ecc, f"{GPU}: double-bit ECC errors",
             VAL + " uncorrectable (double-bit) ECC errors since the driver loaded (> %(ecc_dbe_errors)s).",
             "critical", params=("ecc_dbe_errors",), alert_index=1, fixed_severity=True,
             note="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL is not in dcgm-exporter's default counters"),
    RuleSpec("engine_stalled", "VllmEngineStalled", _engine_stalled, f"vLLM engine {ON} makes no progress",
             "The engine answers scrapes but generates %(generation_tokens_per_s)s tokens/s and finishes "
             "%(qps)s requests/s while requests run or wait.",
             "critical", for_s=60.0, params=("generation_tokens_per_s", "qps", "waiting", "running")),
    RuleSpec("error_rate", "VllmHighErrorRate", _error_rate, f"vLLM engine {ON} fails requests",
             PCT + " of API requests answer 5xx (> %(error_ratio)s).",
             "critical", for_s=60.0, params=("error_ratio",)),
    RuleSpec("error_rate", "VllmHighAbortRate", _abort_rate, f"vLLM engine {ON} aborts requests",
             PCT + " of finished requests were aborted (> %(abort_ratio)s, with at least %(min_requests)s "
             "requests in the window).",
             "critical", for_s=60.0, alert_index=1, params=("abort_ratio", "min_requests")),
    RuleSpec("kv_pressure", "VllmKvCachePressure", _kv_pressure, f"vLLM engine {ON} is short of KV cache",
             "KV-cache usage " + PCT + " > %(kv_usage_ratio)s with preemptions or requests waiting.",
             "warning", for_s=300.0, params=("kv_usage_ratio", "preemptions_per_s", "waiting")),
    RuleSpec("p99_spike", "VllmP99LatencySpike", _p99_baseline, f"vLLM engine {ON}: P99 latency spiked",
             "P99 end-to-end latency or TTFT is " + VAL + "s, over %(baseline_factor_ratio)sx its baseline (the "
             "mean of the last %(baseline_window_s)ss before the last %(baseline_exclude_recent_s)ss).",
             "warning", for_s=60.0, fixed_severity=True,
             params=("baseline_factor_ratio", "baseline_window_s", "baseline_exclude_recent_s", "baseline_min_s")),
    RuleSpec("p99_spike", "VllmTtftSloBreach", _slo(("p99_ttft_s", "p95_ttft_s")), f"vLLM engine {ON}: TTFT over SLO",
             "Time to first token is " + VAL + "s, over its SLO.", "critical", for_s=60.0, alert_index=1,
             fixed_severity=True),
    RuleSpec("p99_spike", "VllmTpotSloBreach", _slo(("p95_itl_s", "p99_itl_s", "p95_tpot_s", "p99_tpot_s")),
             f"vLLM engine {ON}: inter-token latency over SLO", "Inter-token latency (TPOT) is " + VAL
             + "s, over its SLO.", "critical", for_s=60.0, alert_index=2, fixed_severity=True),
    RuleSpec("p99_spike", "VllmE2eSloBreach", _slo(("p99_e2e_s", "p95_e2e_s")),
             f"vLLM engine {ON}: end-to-end latency over SLO", "End-to-end latency is " + VAL + "s, over its SLO.",
             "critical", for_s=60.0, alert_index=3, fixed_severity=True),
    RuleSpec("queue_pressure", "VllmQueuePressure", _queue_waiting, f"vLLM engine {ON} has a queue",
             VAL + " requests wait (> %(waiting)s).", "warning", for_s=60.0, params=("waiting",)),
    RuleSpec("queue_pressure", "VllmQueueTimeHigh", _queue_time, f"vLLM engine {ON}: requests queue too long",
             "P95 queue time is " + VAL + "s (>= %(p95_queue_s)ss).", "warning", for_s=60.0, alert_index=1,
             params=("p95_queue_s",),
             note="router_queue_p99_s is the router's (router_queue_time_seconds), not an engine series: not here"),
    RuleSpec("cold_prefill_slow", "VllmColdPrefillSlow", _prefill_per_token, f"Cold engine {ON}: slow prefill",
             "Prefill takes " + RAW + " s per prompt token (> %(prefill_s_per_token)s).",
             "warning", for_s=300.0, role="cold", params=("prefill_s_per_token",)),
    RuleSpec("cold_prefill_slow", "PrefillLatencyHigh", _prefill_p99, f"Cold engine {ON}: P99 prefill over 1.5 s",
             "P99 prefill is " + VAL + "s (> %(p99_prefill_s)ss): the seed's HighColdPathLatency "
             "(prefill_latency_ms > 1500 for 5m).",
             "warning", for_s=300.0, role="cold", alert_index=1, params=("p99_prefill_s",)),
    RuleSpec("long_prompt_share", "VllmHotLongPromptShare", _long_prompt_share, f"Hot engine {ON}: many long prompts",
             PCT + " of prompts are at or above the route threshold (%(route_threshold_tokens)s tokens; "
             "limit %(long_prompt_ratio)s).",
             "warning", for_s=60.0, role="hot", params=("route_threshold_tokens", "long_prompt_ratio")),
    RuleSpec("long_prompt_share", "RouterMisrouteShare", _misrouted, f"Router {ON} misroutes prompts",
             PCT + " of checked prompts went to the wrong side of the route threshold (> %(misrouted_ratio)s).",
             "warning", for_s=60.0, alert_index=1, params=("misrouted_ratio",),
             note="from the serving router's /metrics (--router-selector)"),
    RuleSpec("hot_decode_jitter", "VllmHotDecodeJitter", _hot_decode_jitter, f"Hot engine {ON}: decode jitter",
             "Inter-token latency coefficient of variation (from bucket midpoints, as the doctor estimates it) "
             "is " + RAW + " > %(itl_cv_ratio)s.", "warning", for_s=60.0, role="hot", params=("itl_cv_ratio",)),
    RuleSpec("memory_fragmentation", "VllmMemoryFragmentation", _memory_fragmentation, f"{GPU}: memory growing",
             "Framebuffer use is " + PCT + " above its minimum over the last %(footprint_window_s)ss (limit "
             "%(memory_growth_ratio)s); the doctor compares with the post-warm-up footprint instead.",
             "warning", for_s=120.0, params=("memory_growth_ratio",),
             rule_params={"footprint_window_s": 21600.0, "min_footprint_mib": 1024.0},
             note="DCGM_FI_DEV_FB_USED against its 6h minimum; a restart hides growth for that window"),
    RuleSpec("throughput_drop", "VllmThroughputDrop", _throughput_drop, f"vLLM engine {ON}: throughput dropped",
             "Generated tokens/s is " + VAL + ", more than %(drop_ratio)s below its baseline while demand holds.",
             "warning", for_s=300.0, params=("drop_ratio", "baseline_window_s", "baseline_exclude_recent_s",
                                             "min_baseline_tokens_per_s")),
    RuleSpec("capacity_scale_out", "VllmCapacityScaleOut", _capacity_scale_out,
             f"vLLM engine {ON} needs more capacity",
             "More than %(qps)s requests/s on one engine (or, with --max-num-seqs, sequence slots full while "
             "requests wait and KV is under %(kv_headroom_ratio)s).",
             "warning", for_s=300.0, params=("qps", "slots_saturated_ratio", "waiting", "kv_headroom_ratio"),
             note="the sequence-slot branch needs --max-num-seqs (vLLM does not export it)"),
    RuleSpec("prefix_cache_miss", "VllmPrefixCacheMiss", _prefix_cache_miss, f"vLLM engine {ON}: prefix cache misses",
             "Prefix-cache hit rate " + PCT + " < %(prefix_hit_ratio)s on an engine with prompt templates.",
             "warning", for_s=120.0, role="templates", params=("prefix_hit_ratio",),
             note="only engines with templates configured: --templates-selector (default: the hot selector)"),
    RuleSpec("api_server_cpu_bound", "VllmApiServerCpuBound", _api_server_cpu_bound,
             f"vLLM API server {ON} is CPU bound",
             "The API server process uses " + VAL + " cores (>= %(process_cpu_cores)s of one core).",
             "warning", for_s=120.0, params=("process_cpu_cores",),
             note="CPU side only: DCGM series carry no engine labels to join GPU idleness on"),
    RuleSpec("batch_underutilized", "VllmBatchUnderutilized", _batch_underutilized,
             f"vLLM engine {ON}: batches not full", "Running requests are " + PCT + " of max_num_seqs "
             "(< %(batch_utilization_ratio)s) while requests wait and KV has room.",
             "info", for_s=120.0, params=("batch_utilization_ratio", "waiting", "kv_usage_ratio")),
    RuleSpec("cold_start", "VllmColdStart", _cold_start, f"vLLM engine {ON} restarted cold",
             "Started less than %(recent_uptime_s)ss ago and P99 TTFT is " + VAL + "s, over %(ttft_baseline_factor)sx "
             "its baseline (or %(ttft_absolute_s)ss without one).",
             "info", params=("recent_uptime_s", "ttft_baseline_factor", "ttft_absolute_s", "baseline_window_s",
                             "baseline_exclude_recent_s")),
    RuleSpec("replica_imbalance", "VllmReplicaImbalance", _replica_imbalance,
             f"vLLM engine {ON} carries more than its share",
             "Running requests or requests/s is " + VAL + ", over %(imbalance_factor)sx the mean of the other "
             "engines of its job.",
             "warning", for_s=300.0, params=("imbalance_factor", "loaded_running", "loaded_qps"),
             note="peers are the engines of the same job (one job per role); only the over-loaded side alerts"),
)

NO_RULE: dict[str, str] = {
    "cuda_oom": "needs the engine's log (torch.OutOfMemoryError / `CUDA out of memory`); vLLM exports no OOM "
                "counter, and a crash shows up as engine_down",
    "capacity_scale_in": "judges a whole pool against the replicas the doctor itself added; over-provisioning "
                         "pages nobody, so there is no alert to raise",
}
