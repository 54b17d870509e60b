"""api_server_cpu_bound: the API server at a full core while the GPU idles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import Signals
from playbooks.api_server_cpu_bound import PLAYBOOK
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.model import ACTION_KINDS, confidence_from


def view(values: Mapping[str, float | None], *, active: bool = False, **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=values)
    return EngineView(name="hot", role="hot", signals=signals, params=dict(PLAYBOOK.defaults), now=1000.0,
                      active=active, **kw)


def test_fires_at_a_full_core_with_an_idle_gpu() -> None:
    cond = PLAYBOOK.check(view({"process_cpu": 0.99, "sm_utilization": 0.3, "dram_utilization": 0.2}))
    assert cond is not None
    ev = cond.evidence[0]
    assert (ev.signal, ev.value, ev.threshold, ev.comparison) == ("process_cpu", 0.99, 0.95, ">=")
    assert [e.signal for e in cond.evidence[1:]] == ["sm_utilization", "dram_utilization"]
    assert "99%" in cond.summary and "GPU idles" in cond.summary


def test_threshold_is_inclusive() -> None:
    assert PLAYBOOK.check(view({"process_cpu": 0.95, "sm_utilization": 0.3})) is not None
    assert PLAYBOOK.check(view({"process_cpu": 0.9, "sm_utilization": 0.3})) is None


def test_pinned_flag_from_the_host_reading() -> None:
    cond = PLAYBOOK.check(view({"api_server_pinned": 1.0, "sm_utilization": 0.2}))
    assert cond is not None and cond.evidence[0].signal == "api_server_pinned"
    assert PLAYBOOK.check(view({"api_server_pinned": 0.0, "sm_utilization": 0.2})) is None


def test_silent_when_the_gpu_is_busy() -> None:
    assert PLAYBOOK.check(view({"process_cpu": 1.0, "sm_utilization": 0.9, "dram_utilization": 0.7})) is None


def test_one_idle_gpu_reading_is_enough() -> None:
    assert PLAYBOOK.check(view({"process_cpu": 1.0, "sm_utilization": 0.9, "dram_utilization": 0.3})) is not None


def test_unknown_gpu_fires_with_lower_confidence() -> None:
    unknown = PLAYBOOK.check(view({"process_cpu": 1.0}))
    idle = PLAYBOOK.check(view({"process_cpu": 1.0, "sm_utilization": 0.1, "dram_utilization": 0.1}))
    assert unknown is not None and idle is not None
    assert "unknown" in unknown.summary
    assert confidence_from(idle.agreeing, idle.considered) > confidence_from(unknown.agreeing, unknown.considered)


def test_hysteresis() -> None:
    assert PLAYBOOK.check(view({"process_cpu": 0.9})) is None
    assert PLAYBOOK.check(view({"process_cpu": 0.9}, active=True)) is not None
    assert PLAYBOOK.check(view({"process_cpu": 0.8}, active=True)) is None


@pytest.mark.parametrize("values", [{}, {"process_cpu": None, "api_server_pinned": None, "sm_utilization": 0.1},
                                    {"process_cpu": None, "sm_utilization": None}])
def test_none_never_fires(values: dict[str, float | None]) -> None:
    assert PLAYBOOK.check(view(values)) is None


def test_remedy_more_api_servers() -> None:
    v = view({"process_cpu": 1.0, "sm_utilization": 0.2})
    cond = PLAYBOOK.check(v)
    assert cond is not None
    (action,) = PLAYBOOK.remedies(v, cond)
    assert (action.kind, action.target, dict(action.params)) == ("relaunch", "hot", {"api_server_count": 2})
    assert action.kind in ACTION_KINDS
    assert "process_*" in action.description  # multiprocess mode drops those metrics


def test_evaluate_for_duration() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"process_cpu": 1.0, "sm_utilization": 0.2})
    assert evaluate([v], state, now=0.0, playbooks=[PLAYBOOK]) == []
    found = evaluate([v], state, now=PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in found] == [("api_server_cpu_bound", "warning")]
