"""long_prompt_share: too many prompts at or above the route threshold reach the hot engine."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook, round_threshold
from playbooks.model import Action, Evidence


class LongPromptShare(Playbook):
    id = "long_prompt_share"
    title = "Long prompts on the hot path"
    severity = "warning"
    signals = ("long_prompt_share", "misrouted_share")
    alerts = ("VllmHotLongPromptShare", "RouterMisrouteShare")
    defaults: ClassVar[dict[str, float]] = {
        "long_prompt_ratio": 0.2, "misrouted_ratio": 0.05, "route_threshold_tokens": 5120.0,
        "route_threshold_factor_ratio": 0.8, "length_limit_tokens": 8192.0, "length_limit_expires_s": 3600.0,
    }
    for_s = 60.0
    roles = ("hot",)
    runbook = """\
**What it means.** More than 20% of the prompts the hot (short-prompt) engine finished were at or
above the route threshold (5120 tokens by default), or the router reports more than 5% of its
requests misrouted. The router sends prompts by an estimate of their length (characters / 4 unless it
counts with the tokenizer), so prompts that tokenize longer than estimated land on the hot engine;
there each long prefill stalls the short requests' decoding.

**Confirm by hand.** Share at or above the threshold on the hot engine:
`1 - sum(rate(vllm:request_prompt_tokens_bucket{le="5000"}[5m])) / sum(rate(vllm:request_prompt_tokens_count[5m]))`
(the buckets are 1-2-5 steps, so the 5120 threshold falls inside the (5000, 10000] bucket); the router's
policy (`GET /policy`: `route_threshold_tokens`) and its misroute counter.

**Remedies.** Move the route threshold down (to about 80% of today's, in 512-token steps) so prompts
that are long in real tokens go cold; if that is not enough, isolate the longest prompts with the
emergency length limit (413 over 8192 tokens for an hour at most; lifted early once idle). Counting
tokens with the tokenizer at the router (`token_counter = "tokenizer"`) removes the estimate's error for
good.
"""

    def check(self, view: EngineView) -> Condition | None:
        found = [e for e in (view.above("long_prompt_share", "long_prompt_ratio"),
                             view.above("misrouted_share", "misrouted_ratio")) if e is not None]
        if not found:
            return None
        threshold = self._threshold(view)
        evidence = [Evidence(e.signal, e.value, e.threshold, e.window_s, e.comparison,
                             f"prompts >= {threshold} tokens on the hot engine" if e.signal == "long_prompt_share"
                             else "router: requests sent to the wrong engine") for e in found]
        parts = [f"{float(e.value or 0):.0%} of hot prompts >= {threshold} tokens" if e.signal == "long_prompt_share"
                 else f"{float(e.value or 0):.0%} of requests misrouted" for e in found]
        considered = sum(view.value(s) is not None for s in self.signals)
        return Condition(" and ".join(parts), tuple(evidence), agreeing=len(found),
                         considered=max(considered, len(found)))

    def _threshold(self, view: EngineView) -> int:
        return int(view.value("route_threshold_tokens") or view.params["route_threshold_tokens"])

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        p = view.params
        current = self._threshold(view)
        target = round_threshold(current * p["route_threshold_factor_ratio"])
        actions: list[Action] = []
        if target < current:
            actions.append(Action("set_route_threshold", "router", {"threshold_tokens": target},
                                  inverse={"threshold_tokens": current}, risk="low",
                                  description="send prompts that are long in real tokens to the cold engine"))
        actions.append(Action("length_limit", "router",
                              {"max_tokens": int(p["length_limit_tokens"]),
                               "expires_in_s": int(p["length_limit_expires_s"])},
                              inverse={"max_tokens": None}, risk="medium",
                              description="isolate the longest prompts: 413 over the limit until it expires"))
        return actions


PLAYBOOK = LongPromptShare()
