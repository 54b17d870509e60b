"""hot_decode_jitter: the hot engine's inter-token latency varies too much (long prefills interrupt decoding)."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


def round_threshold(tokens: float, floor: int = 1024) -> int:
    """A route threshold rounded down to a multiple of 512 tokens, never below `floor`."""
    return max(floor, int(tokens) // 512 * 512)


class HotDecodeJitter(Playbook):
    id = "hot_decode_jitter"
    title = "Decode jitter on the hot path"
    severity = "warning"
    signals = ("router_itl_cv", "itl_cv", "long_prompt_share")
    alerts = ("VllmHotDecodeJitter",)
    defaults: ClassVar[dict[str, float]] = {
        "itl_cv_ratio": 0.10, "route_threshold_tokens": 5120.0, "route_threshold_factor_ratio": 0.8,
        "batched_tokens_factor_ratio": 0.5, "min_batched_tokens": 512.0,
    }
    for_s = 60.0
    roles = ("hot",)
    runbook = """\
**What it means.** On the hot (short-prompt, low-latency) engine the spread of inter-token latency
(coefficient of variation: standard deviation over mean) is above 10%: streaming output stutters. In
vLLM V1 a step that also prefills a prompt chunk takes longer than a pure decode step, so prompts near
the route threshold and large prefill chunks (`max_num_batched_tokens`) make decoding uneven. The
router's own measure (`router_itl_cv`, from the gaps it sees between streamed chunks) is used when
present; the engine's is estimated from histogram bucket midpoints, so its resolution is limited by
the buckets (spread inside one bucket is not seen; a latency sitting on a bucket bound looks noisier).

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
        if signal == "router_itl_cv":
            note = "measured by the router from streamed chunk gaps"
        else:
            note = ("the engine's histogram (no router measure): bucket resolution limits it; "
                    + view.signals.reasons.get("itl_cv", "estimated from bucket midpoints"))
        evidence: list[Evidence] = [Evidence(signal, value, threshold, view.window_s, ">", note)]
        other = "itl_cv" if signal == "router_itl_cv" else "router_itl_cv"
        other_value = view.value(other)
        agreeing, considered = 1, 1
        if other_value is not None:
            considered += 1
            if other_value > limit:
                agreeing += 1
                evidence.append(Evidence(other, other_value, threshold, view.window_s, ">",
                                         "the engine's histogram estimate agrees"))
        return Condition(f"hot inter-token latency varies {value:.0%} (CV, {signal})", tuple(evidence),
                         agreeing=agreeing, considered=considered)

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
