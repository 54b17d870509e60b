"""engine_down: the engine is unreachable, its /health fails, or its log shows the engine core died."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


class EngineDown(Playbook):
    id = "engine_down"
    title = "Engine down"
    severity = "critical"
    signals = ("health",)
    alerts = ("VllmEngineDown",)
    defaults: ClassVar[dict[str, float]] = {}
    runbook = """\
**What it means.** The doctor could not reach the engine, its `/health` answered something other than
200 (vLLM 0.11+ answers 503 once the engine core is dead, older releases 500), or its log shows the
engine core dying (`EngineCore encountered a fatal error`, `EngineDeadError`, `died unexpectedly`).
Requests to it fail; vLLM's API server usually exits a few seconds later.

**Confirm by hand.** `curl -si http://ENGINE/health`; `journalctl -u vllm-hot -n 200` or the log file,
looking for the first ERROR before the shutdown; `nvidia-smi` for the GPU.

**Remedies.** Relaunch the engine with the same arguments (blue/green when a spare GPU exists, else in
place with the router failing over), then warm it up. If it dies again, escalate: the cause (OOM,
Xid, NCCL) is in the log lines quoted as evidence.
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress:
            return None  # the doctor itself is relaunching it: reported as "change in progress"
        health = view.signals.health
        deaths = view.events_of("engine_death")
        evidence: list[Evidence] = []
        if health == "unreachable":
            evidence.append(Evidence("health", "unreachable", "ok", view.window_s, "==",
                                     view.signals.reasons.get("health", "")))
        elif health == "unhealthy":
            evidence.append(Evidence("health_status", float(view.signals.health_status or 0), 200.0,
                                     view.window_s, "!="))
        for event in deaths[-1:]:
            evidence.append(Evidence("log", event.message[:200], "engine death line", view.window_s, "present"))
        if not evidence and health == "ok" and view.value("scrape_ok") == 0.0:
            why = view.signals.reasons.get("scrape_ok", "/metrics could not be read")
            return Condition(f"/metrics unreadable while /health answers: {why}",
                             (Evidence("scrape_ok", 0.0, 1.0, view.window_s, "==", why),), severity="warning")
        if not evidence:
            return None
        what = "unreachable" if health == "unreachable" else (
            f"/health answers {view.signals.health_status}" if health == "unhealthy" else "engine core died (log)")
        return Condition(f"engine {what}", tuple(evidence), agreeing=len(evidence), considered=2)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        return [
            Action("relaunch", view.name, {"reason": "engine down"}, risk="medium"),
            Action("escalate", view.name, {"reason": condition.summary}, risk="low"),
        ]


PLAYBOOK = EngineDown()
