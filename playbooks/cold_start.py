"""cold_start: a recent (re)start and first-token latency far above the engine's steady state."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


class ColdStart(Playbook):
    id = "cold_start"
    title = "Cold start"
    severity = "info"
    signals = ("uptime_s", "p99_ttft_s")
    alerts = ("VllmColdStart",)
    defaults: ClassVar[dict[str, float]] = {
        "recent_uptime_s": 600.0,  # a start within this long counts as recent
        "ttft_baseline_factor": 3.0,  # P99 TTFT this many times its steady-state baseline
        "ttft_absolute_s": 2.0,  # used when no baseline is known
        "baseline_window_s": 3600.0,
        "baseline_exclude_recent_s": 600.0,
    }
    runbook = """\
**What it means.** The engine (re)started within the last 10 minutes and its P99 time to first token
is far above its steady state (more than 3x its baseline from the hour before, or above 2 s when no
baseline is known). The first requests after a start pay for CUDA-graph capture at new batch shapes,
torch.compile warm-up, an empty prefix cache and allocator growth. It passes by itself; warming up
makes the first users not pay for it.

**Confirm by hand.** `time() - process_start_time_seconds` on the engine's `/metrics` (absent in
multiprocess mode; the start-up log lines `Starting vLLM API server` / `Application startup complete`
give the time); `histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`
against the same `offset 1h`.

**Remedies.** Warm up: send requests at batch 4, 8 and 16 with 512, 1024 and 2048-token prompts (and the
configured templates) before the router gives the engine full traffic.
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress:
            return None  # the doctor's own relaunch warms the engine up as its last step
        p = view.params
        recent = self._recent_start(view)
        if recent is None:
            return None
        ttft = view.value("p99_ttft_s")
        if ttft is None:
            return None
        base = view.history.baseline("p99_ttft_s", p["baseline_window_s"], p["baseline_exclude_recent_s"])
        relax = (1 - view.hysteresis) if view.active else 1.0
        if base is not None and base > 0:
            threshold = base * p["ttft_baseline_factor"]
            note = f"{ttft / base:.1f}x the steady-state baseline {base:.3g} s"
        else:
            threshold = p["ttft_absolute_s"]
            note = "no baseline known: absolute threshold"
        if ttft <= threshold * relax:
            return None
        latency = Evidence("p99_ttft_s", ttft, threshold, view.window_s, ">", note)
        when = f"{recent.value:.0f} s ago" if isinstance(recent.value, float) else "recently"
        return Condition(f"started {when} and P99 TTFT is {ttft:.3g} s", (recent, latency),
                         agreeing=2 if base else 1, considered=2)

    def _recent_start(self, view: EngineView) -> Evidence | None:
        """Evidence of a recent start: uptime under the threshold, or a start-up log line in the window."""
        p = view.params
        uptime = view.value("uptime_s")
        limit = p["recent_uptime_s"] * (1 + view.hysteresis) if view.active else p["recent_uptime_s"]
        if uptime is not None:
            if uptime < limit:
                return Evidence("uptime_s", uptime, p["recent_uptime_s"], view.window_s, "<")
            return None
        starts = [e for e in view.events_of("startup_config") if view.now - e.timestamp < limit]
        if starts:
            return Evidence("log", starts[-1].message[:200], "start-up line", view.window_s, "present",
                            "uptime unknown; the log shows a start within the window")
        return None

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        return [Action("warm_up", view.name, {"batches": [4, 8, 16], "prompt_tokens": [512, 1024, 2048]},
                       risk="low", description="requests at batch 4/8/16 x 512/1024/2048 prompt tokens")]


PLAYBOOK = ColdStart()
