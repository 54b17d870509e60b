"""error_rate: too many requests fail (5xx / finished_reason=error) or are aborted."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


class ErrorRate(Playbook):
    id = "error_rate"
    title = "High error or abort rate"
    severity = "critical"
    signals = ("error_rate", "abort_rate", "qps")
    alerts = ("VllmHighErrorRate", "VllmHighAbortRate")
    defaults: ClassVar[dict[str, float]] = {"error_ratio": 0.05, "abort_ratio": 0.10, "min_requests": 10.0}
    for_s = 60.0
    runbook = """\
**What it means.** More than 5% of the engine's requests failed (HTTP 5xx from the API server, or
`finished_reason="error"`), or more than 10% were aborted (the client went away or timed out, often
because latency grew). Finishing on `length` is a normal finish, not an abort. An abort share of fewer
than `min_requests` finished requests in the window is too noisy to judge and does not fire (errors
always count: a server failing every request may finish none).

**Confirm by hand.** `sum(rate(http_requests_total{handler=~"/v1/.*",status="5xx"}[5m])) /
sum(rate(http_requests_total{handler=~"/v1/.*"}[5m]))`;
`sum by (finished_reason) (rate(vllm:request_success_total[5m]))` for error and abort shares; the API
server's access log (`grep -c '" 500 '`) and the ERROR lines around the same minutes.

**Remedies.** Escalate with the evidence: the cause is in the log lines (OOM, NCCL, a bad request
pattern) or upstream (clients timing out because of a latency problem another finding names). Fix
that cause; errors alone do not say which knob to turn.
"""

    def check(self, view: EngineView) -> Condition | None:
        evidence: list[Evidence] = []
        errors = view.above("error_rate", "error_ratio")
        if errors is not None:
            evidence.append(Evidence(errors.signal, errors.value, errors.threshold, errors.window_s, ">",
                                     view.signals.reasons.get("error_rate", "")))
        qps = view.value("qps")
        enough = qps is None or qps * view.window_s >= view.params["min_requests"]
        aborts = view.above("abort_rate", "abort_ratio")
        if aborts is not None and enough:  # a share of a handful of finished requests is noise
            evidence.append(Evidence(aborts.signal, aborts.value, aborts.threshold, aborts.window_s, ">",
                                     "finished_reason=abort share (length is a normal finish)"))
        if not evidence:
            return None
        parts = [f"{e.value:.0%} of requests {'failed' if e.signal == 'error_rate' else 'aborted'}"
                 for e in evidence if isinstance(e.value, float)]
        return Condition(" and ".join(parts), tuple(evidence), agreeing=len(evidence), considered=2)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        params: dict[str, float | str] = {"reason": condition.summary}
        for name in ("error_rate", "abort_rate", "qps"):
            value = view.value(name)
            if value is not None:
                params[name] = round(value, 4)
        return [Action("escalate", view.name, params, risk="low",
                       description="page a person with the error and abort shares and the log lines")]


PLAYBOOK = ErrorRate()
