"""hot_decode_jitter: the hot engine's inter-token latency varies too much (long prefills interrupt decoding)."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook, round_threshold
from playbooks.model import Action, Evidence


class HotDecodeJitter(Playbook):
    id = "hot_decode_jitter"
    title = "Decode jitter on the hot path"
    severity = "warning"
    signals = ("router_itl_cv", "itl_cv", "p50_itl_s", "p95_itl_s")
    alerts = ("VllmHotDecodeJitter",)
    defaults: ClassVar[dict[str, float]] = {
        "itl_cv_ratio": 0.10, "itl_tail_ratio": 4.0, "route_threshold_tokens": 5120.0,
        "route_threshold_factor_ratio": 0.8, "batched_tokens_factor_ratio": 0.5, "min_batched_tokens": 512.0,
    }
    for_s = 60.0
    roles = ("hot",)
    runbook = """\
**What it means.** On the hot (short-prompt, low-latency) engine the spread of inter-token latency
(coefficient of variation: standard deviation over mean) is above 10%: streaming output stutters. In
vLLM V1 a step that also prefills a prompt chunk takes longer than a pure decode step, so prompts near
the route threshold and large prefill chunks (`max_num_batched_tokens`) make decoding uneven. The
router's own measure (`router_itl_cv`, from the gaps it sees between streamed chunks) is used when
present. The engine's is estimated from histogram bucket midpoints, so its resolution is limited by
the buckets (one spans up to 2.5x; spread inside it is not seen, a latency on a bound looks noisier).
Even the router's exact measure reads 20-50% on a healthy engine under mixed load, because every
prefill step slows the decodes that share it (the simulator's hot engine: 19% at 1.5 QPS, 31% at 3,
52% at 4.5). So the finding also needs the tail to be stretched: P95 inter-token latency more than 4x
the median (`itl_tail_ratio`; in the simulator: healthy under 2x, an overloaded engine about 3x,
prompts near the threshold reaching the hot engine 5x to 13x).

**Confirm by hand.** `histogram_quantile(0.99, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))`
against the same at 0.5 (older releases: `vllm:time_per_output_token_seconds`); a wide gap means
uneven decoding. `vllm:request_prompt_tokens` on the hot engine for prompts near the threshold.

**Remedies.** Lower the route threshold (about 80% of today's, in 512-token steps) so fewer large
prefills reach the hot engine; then relaunch it with a smaller `--max-num-batched-tokens` so each
step's prefill chunk is shorter.
"""

    def check(self, view: EngineView) -> Condition | None:
        signal = "router_itl_cv" if view.value("router_itl_cv") is not None else "itl_cv"
        value = view.value(signal)
        if value is None:
            return None
        threshold = view.params["itl_cv_ratio"]
        limit = threshold * (1 - view.hysteresis) if view.active else threshold
        if value <= limit:
            return None
        # Spread alone does not say stutter: every prefill step slows the decodes that share it, so a healthy
        # engine under mixed load reads 20-50% even on the router's exact measure (the simulator's hot engine:
        # 19% at 1.5 QPS, 31% at 3, 52% at 4.5, all without a single long prompt). The finding also needs the
        # tail stretched: P95 inter-token latency a multiple of the median.
        tail = self._tail(view)
        if tail is None:
            return None
        if signal == "router_itl_cv":
            evidence = [Evidence(signal, value, threshold, view.window_s, ">",
                                 "measured by the router from streamed chunk gaps")]
            engine_cv = view.value("itl_cv")
            agreeing, considered = 2, 2 + int(engine_cv is not None)
            if engine_cv is not None and engine_cv > limit:
                agreeing += 1
                evidence.append(Evidence("itl_cv", engine_cv, threshold, view.window_s, ">",
                                         "the engine's histogram estimate agrees"))
            evidence.append(tail)
            return Condition(f"hot inter-token latency varies {value:.0%} (CV, router); P95 {tail.value:.1f}x "
                             "the median", tuple(evidence), agreeing=agreeing, considered=considered)
        # The engine's CV comes from histogram bucket midpoints (bounds 10, 25, 50, 75, 100 ms...: one bucket
        # spans up to 2.5x), so it reads far above 10% on any engine serving mixed traffic.
        note = "the engine's histogram (no router measure): bucket resolution limits it; " + \
            view.signals.reasons.get("itl_cv", "estimated from bucket midpoints")
        return Condition(f"hot inter-token latency varies {value:.0%} (CV, itl_cv); P95 {tail.value:.1f}x the median",
                         (Evidence(signal, value, threshold, view.window_s, ">", note), tail),
                         agreeing=2, considered=2)

    def _tail(self, view: EngineView) -> Evidence | None:
        p50, p95 = view.value("p50_itl_s"), view.value("p95_itl_s")
        if p50 is None or p95 is None or p50 <= 0:
            return None
        ratio = p95 / p50
        factor = view.params["itl_tail_ratio"]
        limit = factor * (1 - view.hysteresis) if view.active else factor
        if ratio <= limit:
            return None
        return Evidence("p95_itl_s / p50_itl_s", ratio, factor, view.window_s, ">",
                        f"P95 {p95 * 1000:.0f} ms against a median of {p50 * 1000:.0f} ms")

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        p = view.params
        actions: list[Action] = []
        current = int(view.value("route_threshold_tokens") or p["route_threshold_tokens"])
        target = round_threshold(current * p["route_threshold_factor_ratio"])
        if target < current:
            actions.append(Action("set_route_threshold", "router", {"threshold_tokens": target},
                                  inverse={"threshold_tokens": current}, risk="low",
                                  description="fewer large prefills on the hot engine"))
        batched = view.config.max_num_batched_tokens
        floor = max(int(p["min_batched_tokens"]), view.config.max_num_seqs or 0)
        if batched is None:
            actions.append(Action("relaunch", view.name, {"max_num_batched_tokens": "lower"}, risk="medium",
                                  description="smaller prefill chunks per step"))
        else:
            lower = max(floor, int(batched * p["batched_tokens_factor_ratio"]) // 256 * 256)
            if lower < batched:
                actions.append(Action("relaunch", view.name, {"max_num_batched_tokens": lower},
                                      inverse={"max_num_batched_tokens": batched}, risk="medium",
                                      description="smaller prefill chunks per step"))
        if not actions:
            actions.append(Action("escalate", view.name, {"reason": condition.summary}))
        return actions


PLAYBOOK = HotDecodeJitter()
