"""router_down: the admission router in front of the engines does not answer: every request sent through it fails."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence
from playbooks.pool import deployment_anchor


class RouterDown(Playbook):
    id = "router_down"
    title = "Router down"
    severity = "critical"
    signals = ("router_up",)
    alerts = ("RouterDown",)
    defaults: ClassVar[dict[str, float]] = {}
    runbook = """\
**What it means.** The doctor is configured with the serving router (`[router] url`, `--router`) and none of
this run's reads of its `/metrics` was answered: the router is down, hung, or unreachable from here. The
engines behind it may be healthy (their own findings say so) while every client request that goes through
the router fails: at the front door this is the outage. One finding per deployment, on the first engine by
name; the router's own signals (misrouting, its queue, the length limit) are unknown while it is down.

**Confirm by hand.** `curl -si http://ROUTER/health` and `curl -s http://ROUTER/metrics | head`;
`systemctl status doctor-router` (or the unit, pod or process that runs it) and its log for the last lines
before it stopped; `ss -ltnp | grep PORT` on its host. A router that accepts connections but answers nothing
is hung: its event loop is blocked (`py-spy dump --pid PID`).

**Remedies.** Page a person: the doctor does not start or restart the router (it may run anywhere, under
any supervisor). Restart it through its supervisor; it reloads its policy from its policy file, so the
route threshold and limits the doctor set survive. While it is down, send clients to the engines directly
only if their own limits protect them (long prompts reach the hot engine).
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.value("router_up") != 0.0 or view.name != deployment_anchor(view):
            return None  # the router answered (or is not configured), or another engine carries the finding
        why = view.signals.reasons.get("router_up", "its /metrics did not answer")
        return Condition(f"the router does not answer: requests sent through it fail ({why})",
                         (Evidence("router_up", 0.0, 1.0, view.window_s, "==", why),))

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        return [Action("escalate", view.name, {"reason": condition.summary}, risk="low")]


PLAYBOOK = RouterDown()
