"""prefix_cache_miss: the prefix-cache hit rate is low on an engine whose prompt templates are configured."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


class PrefixCacheMiss(Playbook):
    id = "prefix_cache_miss"
    title = "Prefix cache missing"
    severity = "warning"
    signals = ("prefix_cache_hit_rate", "p99_ttft_s", "prefill_s_per_token")
    alerts = ("VllmPrefixCacheMiss",)
    defaults: ClassVar[dict[str, float]] = {
        "prefix_hit_ratio": 0.7,  # where templates are configured (p99_spike reads 0.6 as a root cause)
        "ttft_rise_ratio": 1.5,  # P99 TTFT this many times its baseline supports the finding
        "baseline_window_s": 3600.0,
        "baseline_exclude_recent_s": 600.0,
        "variations": 20.0,  # prompts replayed per template when re-warming
    }
    for_s = 120.0
    runbook = """\
**What it means.** The engine serves prompts built from configured templates (shared system prompts,
few-shot prefixes), so most prompt tokens should be found in the prefix cache, yet fewer than 70% are.
The cache was reset or evicted (a restart, `/reset_prefix_cache`, a burst of long unique prompts pushing
the template blocks out) and every request pays the full prefill again: TTFT and prefill time rise. An
engine without templates is not judged here: a low hit rate is then a property of the traffic, and
`p99_spike` reads it (below 0.6) only as a root cause of a latency spike.

**Confirm by hand.** `rate(vllm:prefix_cache_hits_total[5m]) / rate(vllm:prefix_cache_queries_total[5m])`
(tokens; before 0.12 also `vllm:gpu_prefix_cache_hits_total` / `_queries_total`, which count blocks in
0.8.5); the stats log line's `Prefix cache hit rate: X%`; `--enable-prefix-caching` in the start-up
`non-default args` line; `histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`.

**Remedies.** Re-warm the prefix cache: replay the configured templates (about 20 variations each) so
their blocks are cached again. If the hit rate falls again soon, look for what evicts them: long
prompts on the same engine (`long_prompt_share`), KV pressure, or a template that changed.
"""

    def check(self, view: EngineView) -> Condition | None:
        if not view.templates_configured or view.change_in_progress:
            return None
        hit = view.below("prefix_cache_hit_rate", "prefix_hit_ratio")
        if hit is None:
            return None
        p = view.params
        supporting: list[Evidence] = []
        ttft = view.value("p99_ttft_s")
        base = view.history.baseline("p99_ttft_s", p["baseline_window_s"], p["baseline_exclude_recent_s"])
        if ttft is not None and base is not None and base > 0 and ttft > base * p["ttft_rise_ratio"]:
            supporting.append(Evidence("p99_ttft_s", ttft, base * p["ttft_rise_ratio"], view.window_s, ">",
                                       f"{ttft / base:.1f}x its baseline {base:.3g} s"))
        return Condition(f"prefix cache hit rate {hit.value:.0%} (< {p['prefix_hit_ratio']:.0%}) "
                         "with templates configured", (hit, *supporting), agreeing=1 + len(supporting), considered=2)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        return [Action("rewarm_prefix_cache", view.name, {"variations": int(view.params["variations"])}, risk="low",
                       description="replay the configured prompt templates to refill the prefix cache")]


PLAYBOOK = PrefixCacheMiss()
