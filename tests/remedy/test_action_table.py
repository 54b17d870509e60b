"""The one table of action kinds (playbooks/action_kinds.py) is what the planner, guardrails and actuators use."""

from __future__ import annotations

from doctor.remedy import planner
from doctor.remedy.launcher import LocalLauncher
from doctor.remedy.router_actuator import RouterActuator
from doctor.remedy.vllm_admin import VllmAdminActuator
from playbooks.action_kinds import ACTION_TABLE, kinds
from playbooks.model import ACTION_KINDS, Action


def test_every_changing_kind_has_exactly_one_actuator_that_applies_it() -> None:
    applied = [*RouterActuator.kinds, *VllmAdminActuator.kinds, *LocalLauncher.kinds]
    assert len(applied) == len(set(applied))
    assert set(applied) == set(kinds(scope="router")) | set(kinds(scope="engine"))
    assert set(RouterActuator.kinds) == set(kinds(scope="router")) == planner.ROUTER_KINDS


def test_the_table_is_consistent() -> None:
    for kind, a in ACTION_TABLE.items():
        assert a.kind == kind and ACTION_KINDS[kind] == a.summary
        # an inverse restores the previous values with the same kind; a replica given back is undone by adding one
        assert a.inverse in (None, kind) or (kind, a.inverse) == ("scale_in", "scale_out")
        assert (a.scope == "router") == (a.actuator == "router")
        assert not a.per_upstream or a.scope == "router"
    assert {"set_max_in_flight", "stop_routing"} == planner.ENGINE_SCOPED_ROUTER_KINDS
    assert {"stop_routing", "escalate"} == planner.ESCALATING_KINDS
    assert Action("relaunch", "hot").to_dict()["description"] == ACTION_TABLE["relaunch"].summary
