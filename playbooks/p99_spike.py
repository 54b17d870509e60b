"""p99_spike: tail latency (P99 e2e or TTFT, and the configured P95 TTFT/TPOT SLOs) over its SLO or baseline."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook, round_threshold
from playbooks.model import Action, Evidence

# SLO key (the config's `slo` table) -> the signal it bounds. TPOT is vLLM's inter-token latency.
SLO_SIGNALS: dict[str, str] = {
    "p99_e2e_s": "p99_e2e_s", "p99_ttft_s": "p99_ttft_s", "p95_e2e_s": "p95_e2e_s", "p95_ttft_s": "p95_ttft_s",
    "p95_tpot_s": "p95_itl_s", "p95_itl_s": "p95_itl_s", "p99_tpot_s": "p99_itl_s", "p99_itl_s": "p99_itl_s",
}
BASELINE_SIGNALS: tuple[str, ...] = ("p99_e2e_s", "p99_ttft_s")


class P99Spike(Playbook):
    id = "p99_spike"
    title = "Tail latency spike"
    severity = "warning"
    signals = ("p99_e2e_s", "p99_ttft_s", "p95_ttft_s", "p95_itl_s", "very_long_prompt_share",
               "prefix_cache_hit_rate")
    alerts = ("VllmP99LatencySpike", "VllmTtftSloBreach", "VllmTpotSloBreach", "VllmE2eSloBreach")
    defaults: ClassVar[dict[str, float]] = {
        "baseline_factor_ratio": 2.0, "baseline_window_s": 3600.0, "baseline_exclude_recent_s": 600.0,
        "baseline_min_s": 0.25, "baseline_min_requests": 10.0, "very_long_prompt_ratio": 0.0,
        "prefix_hit_rate_ratio": 0.6,
        "length_limit_tokens": 8192.0, "length_limit_expires_s": 3600.0, "route_threshold_tokens": 5120.0,
        "route_threshold_factor_ratio": 0.8,
    }
    for_s = 90.0
    runbook = """\
**What it means.** The engine's P99 end-to-end latency or P99 time to first token is over its SLO
(critical: users are hurt now) or more than twice its baseline (the last hour, excluding the last 10
minutes; warning). Configured P95 TTFT and P95 TPOT SLOs (`p95_ttft_s`, `p95_tpot_s`: TPOT is vLLM's
inter-token latency) are checked the same way. The doctor then looks for the usual causes: prompts
of 8K tokens or more reaching the engine (one long prefill stalls every decode batch behind it) and a
prefix-cache hit rate under 60% where templates are configured or the rate used to be higher.

**Confirm by hand.** `histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`
and the same for `vllm:e2e_request_latency_seconds` and `vllm:inter_token_latency_seconds` (older
releases: `vllm:time_per_output_token_seconds`); long prompts:
`sum(rate(vllm:request_prompt_tokens_count[5m])) - sum(rate(vllm:request_prompt_tokens_bucket{le="5000"}[5m]))`
(prompts over 5000 tokens: the buckets go 5000, 10000);
prefix hits: `rate(vllm:prefix_cache_hits_total[5m]) / rate(vllm:prefix_cache_queries_total[5m])`.

**Remedies.** In order of the cause found: an emergency length limit at the router (prompts over 8192
tokens get 413 for an hour at most: the doctor lifts its own limit once it has refused nothing, or
only a trickle, for 10 minutes and no engine has a queue), a lower route threshold so long prompts go
to the cold engine, and a re-warm of the prefix cache from the configured templates. The length limit
is left out when the engine is known to see no prompt over it (it would change nothing); without a
cause in evidence the
order is the same; escalate if none helps (a spike from load alone is `queue_pressure`'s and
`capacity_scale_out`'s to fix).
"""

    def _over(self, view: EngineView, signal: str, limit: float, note: str) -> Evidence | None:
        value = view.value(signal)
        if value is None or limit <= 0:
            return None
        relaxed = limit * (1 - view.hysteresis) if view.active else limit
        return Evidence(signal, value, limit, view.window_s, ">", note) if value > relaxed else None

    def _prefix_cause(self, view: EngineView) -> Evidence | None:
        low = view.below("prefix_cache_hit_rate", "prefix_hit_rate_ratio")
        if low is None:
            return None
        if view.templates_configured:
            return Evidence(low.signal, low.value, low.threshold, low.window_s, "<", "templates are configured")
        before = view.history.baseline("prefix_cache_hit_rate", window_s=view.params["baseline_window_s"],
                                       exclude_recent_s=view.params["baseline_exclude_recent_s"])
        if before is not None and before >= view.params["prefix_hit_rate_ratio"]:
            return Evidence(low.signal, low.value, low.threshold, low.window_s, "<",
                            f"down from a baseline of {before:.0%}")
        return None  # prompts that never shared prefixes: a low hit rate is their normal

    def check(self, view: EngineView) -> Condition | None:
        p = view.params
        slo_breaches: list[Evidence] = []
        for key, signal in SLO_SIGNALS.items():
            slo = view.slo.get(key)
            if slo is not None and not any(e.signal == signal for e in slo_breaches):
                e = self._over(view, signal, float(slo), f"SLO {key} = {float(slo):g}s")
                if e is not None:
                    slo_breaches.append(e)
        baseline_breaches: list[Evidence] = []
        finished = (view.value("qps") or 0.0) * view.window_s
        # The P99 of a handful of requests is just the slowest one: with few, ask for twice the jump.
        few = finished < p["baseline_min_requests"]
        for signal in BASELINE_SIGNALS:
            if any(e.signal == signal for e in slo_breaches) or (view.value(signal) or 0.0) < p["baseline_min_s"]:
                continue
            base = view.history.baseline(signal, window_s=p["baseline_window_s"],
                                         exclude_recent_s=p["baseline_exclude_recent_s"])
            if base is not None and base > 0:
                factor = p["baseline_factor_ratio"] * (2.0 if few else 1.0)
                note = f"{factor:g}x its baseline {base:.3g}s" + (f" ({finished:.0f} requests: few)" if few else "")
                e = self._over(view, signal, factor * base, note)
                if e is not None:
                    baseline_breaches.append(e)
        breaches = slo_breaches + baseline_breaches
        if not breaches:
            return None
        causes: list[Evidence] = []
        long = view.above("very_long_prompt_share", "very_long_prompt_ratio")
        if long is not None:
            causes.append(Evidence(long.signal, long.value, long.threshold, long.window_s, ">",
                                   "prompts of 8K tokens or more reach this engine"))
        prefix = self._prefix_cause(view)
        if prefix is not None:
            causes.append(prefix)
        worst = breaches[0]
        what = "over its SLO" if slo_breaches else "over 2x its baseline"
        summary = f"{worst.signal} {float(worst.value or 0):.3g}s {what}"
        if causes:
            summary += " with " + " and ".join(
                "long prompts" if c.signal == "very_long_prompt_share" else "a low prefix-cache hit rate"
                for c in causes)
        considered = len([s for s in dict.fromkeys(SLO_SIGNALS.values()) if view.value(s) is not None]) + 2
        return Condition(summary, (*breaches, *causes), agreeing=len(breaches) + len(causes),
                         considered=max(considered, len(breaches) + len(causes)),
                         severity="critical" if slo_breaches else "warning",
                         details={"long_prompts": "yes" if long is not None else "no",
                                  "prefix": "yes" if prefix is not None else "no"})

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        p = view.params
        limit = Action("length_limit", "router",
                       {"max_tokens": int(p["length_limit_tokens"]), "expires_in_s": int(p["length_limit_expires_s"])},
                       inverse={"max_tokens": None}, risk="medium",
                       description="emergency: reject prompts over the limit with 413 until it expires")
        # A limit at N tokens changes nothing for an engine known to see no prompt over N: it would only spend
        # the action budget and a cooldown. Proposed when such prompts are in evidence, or not known either way.
        limit_can_help = condition.details.get("long_prompts") == "yes" or view.value("very_long_prompt_share") is None
        actions: list[Action | None] = [limit if limit_can_help else None, None, None]
        if view.role != "cold":
            current = view.value("route_threshold_tokens") or p["route_threshold_tokens"]
            target = round_threshold(current * p["route_threshold_factor_ratio"])
            if target < current:
                actions[1] = Action("set_route_threshold", "router", {"threshold_tokens": target},
                                    inverse={"threshold_tokens": int(current)}, risk="low",
                                    description="route long prompts to the cold engine")
        if view.templates_configured:
            actions[2] = Action("rewarm_prefix_cache", view.name, {}, risk="low")
        if condition.details.get("prefix") == "yes" and condition.details.get("long_prompts") != "yes":
            actions = [actions[2], actions[0], actions[1]]
        return [a for a in actions if a is not None]


PLAYBOOK = P99Spike()
