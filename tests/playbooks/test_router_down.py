"""router_down: one critical finding for the deployment when none of the run's reads of the router was answered."""

from __future__ import annotations

from collections.abc import Mapping

from collectors.combine import EngineReading
from collectors.types import Signals
from doctor.pipeline import build_views, run_playbooks
from playbooks.router_down import PLAYBOOK

ROLES = {"hot": "hot", "cold": "cold", "hot-r2": "hot"}


def _judge(router: Mapping[str, float | None], reasons: Mapping[str, str] | None = None) -> list:  # type: ignore[type-arg]
    signals = {n: Signals(engine=n, window_s=60.0, health="ok", values=dict(router),  # type: ignore[arg-type]
                          reasons=dict(reasons or {})) for n in ROLES}
    views = build_views([EngineReading(name=n, role=r, url=f"http://{n}") for n, r in ROLES.items()], signals,
                        now=1000.0)
    return [f for f in run_playbooks(views, {}, now=1000.0) if f.playbook == PLAYBOOK.id]


def test_a_router_that_did_not_answer_is_one_critical_finding_on_the_first_engine() -> None:
    why = "http://127.0.0.1:8080: router /metrics: ConnectError: [Errno 111] Connection refused"
    [finding] = _judge({"router_up": 0.0}, {"router_up": why})
    assert (finding.engine, finding.severity) == ("cold", "critical")  # first by name, once for all three engines
    assert "Connection refused" in finding.summary
    assert [(e.signal, e.value) for e in finding.evidence] == [("router_up", 0.0)]
    assert [a.kind for a in finding.remedies] == ["escalate"]  # the doctor does not run the router: a person


def test_a_router_that_answered_or_none_configured_is_no_finding() -> None:
    assert _judge({"router_up": 1.0}) == []
    assert _judge({}) == []  # no [router] url: router_up unknown, nothing to say
