"""engine_stalled: /health answers 200 but no token comes out while requests wait or run."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


class EngineStalled(Playbook):
    id = "engine_stalled"
    title = "Engine stalled"
    severity = "critical"
    signals = ("health", "generation_tokens_per_s", "qps", "waiting", "running", "generation_idle_s")
    alerts = ("VllmEngineStalled",)
    defaults: ClassVar[dict[str, float]] = {"generation_tokens_per_s": 0.0, "qps": 0.0, "waiting": 0.0,
                                            "running": 0.0, "stall_s": 60.0}
    # A few seconds without tokens can be a single long prefill (a 100K-token prompt takes seconds); a minute and
    # a half is not. A minute is measured (how long the generation counter has not moved across the window's
    # reads) and must then hold 30 s more, so a cold engine's longest chunked prefill does not read as a hang.
    for_s = 30.0
    runbook = """\
**What it means.** The engine answers `/health` with 200 but produced no token and finished no request
for a minute and a half or more (`vllm:generation_tokens_total` unchanged across the window's reads for
a minute, and still 30 s later) while requests were waiting or running: the engine core is hung (a stuck forward
pass, an NCCL collective that never returns, a deadlocked scheduler). Clients time out; nothing
restarts it by itself, because the health check still passes.

**Confirm by hand.** `curl -s http://ENGINE/metrics | grep -E
'vllm:(num_requests_running|num_requests_waiting|generation_tokens_total)'` twice a minute apart: running
or waiting above 0 and `generation_tokens_total` unchanged. `rate(vllm:generation_tokens_total[2m]) == 0
and (vllm:num_requests_running + vllm:num_requests_waiting) > 0`. The log's stats line shows `Avg
generation throughput: 0.0 tokens/s` with `Running: N reqs`; look for `RPC call to execute_model timed
out`, NCCL watchdog lines, and `py-spy dump --pid ENGINE_CORE_PID` for where it hangs.

**Remedies.** Relaunch the engine (blue/green when a spare GPU exists, else in place with the router
failing over), then warm it up; escalate with the evidence if it hangs again.
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress or view.signals.health != "ok":
            return None  # engine_down covers a failing /health; a relaunch in progress is expected silence
        gen, qps = view.value("generation_tokens_per_s"), view.value("qps")
        if gen is None or qps is None:
            return None  # no progress measure: silence is not evidence of a stall
        if gen > view.params["generation_tokens_per_s"] or qps > view.params["qps"]:
            return None
        idle = view.value("generation_idle_s")
        if idle is None or idle < view.params["stall_s"]:
            return None  # not silent for long enough to tell a hang from a long prefill
        pending = [e for e in (view.above("waiting", "waiting"), view.above("running", "running")) if e is not None]
        if not pending:
            return None  # idle, or queue gauges unknown
        evidence: list[Evidence] = [
            Evidence("generation_idle_s", idle, view.params["stall_s"], view.window_s, ">=",
                     "vllm:generation_tokens_total has not moved"),
            Evidence("generation_tokens_per_s", gen, view.params["generation_tokens_per_s"], view.window_s, "<="),
            Evidence("qps", qps, view.params["qps"], view.window_s, "<="),
            *pending,
            Evidence("health_status", float(view.signals.health_status or 200), 200.0, view.window_s, "=="),
        ]
        hangs = view.events_of("model_timeout", "nccl_error")
        for event in hangs[-1:]:
            evidence.append(Evidence("log", event.message[:200], f"{event.kind} line", view.window_s, "present"))
        waiting, running = view.value("waiting") or 0.0, view.value("running") or 0.0
        return Condition(f"no token progress for {idle:g}s with {running:g} running and {waiting:g} waiting "
                         f"while /health answers 200", tuple(evidence), agreeing=1 + int(bool(hangs)), considered=2)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        return [
            Action("relaunch", view.name, {"reason": "stalled: no token progress"}, risk="medium",
                   description="restart the hung engine (blue/green where a spare GPU exists), then warm it up"),
            Action("escalate", view.name, {"reason": condition.summary}, risk="low"),
        ]


PLAYBOOK = EngineStalled()
