"""A pool's scale-out is trimmed to the GPU budget before the guardrails judge it; a scale-in names a replica."""

from __future__ import annotations

import asyncio
from pathlib import Path

from doctor.config import config_from_dict
from doctor.remedy.guardrails import Guardrails
from doctor.remedy.planner import plan, verify_spec, within_gpu_budget
from doctor.remedy.setup import remediator
from playbooks.action_kinds import ACTION_TABLE
from playbooks.model import Action, Finding


def _finding(action: Action, playbook: str = "queue_pressure") -> Finding:
    return Finding(playbook, "hot", "warning", 0.9, "the hot pool is saturated", (), (action,), "", 1.0)


def _config(mode: str = "auto", tp: int | None = None) -> object:
    hot = {"name": "hot", "url": "http://127.0.0.1:9", "role": "hot", "gpus": [0]}
    if tp:
        hot["tensor_parallel_size"] = tp
    return config_from_dict({"doctor": {"mode": mode}, "bounds": {"gpu_pool": [0, 1, 2, 3]},
                             "engines": [hot, {"name": "hot-2", "url": "http://127.0.0.1:10", "role": "hot",
                                               "gpus": [1]}]})


ADD3 = Action("scale_out", "hot", {"add_replicas": 3}, inverse={"add_replicas": -3}, risk="medium",
              description="add 3 replica(s): the hot pool is saturated")


def test_a_replica_count_over_the_free_gpus_is_trimmed_to_them() -> None:
    [p] = plan([_finding(ADD3)])
    trimmed = within_gpu_budget(p, 2)
    assert trimmed.action.params == {"add_replicas": 2} and trimmed.action.inverse == {"add_replicas": -2}
    assert trimmed.action.description.endswith("[trimmed from 3 to 2: 2 free GPU(s), 1 a replica]")
    assert within_gpu_budget(p, 5) is p and within_gpu_budget(p, None) is p  # fits, or unknown: unchanged
    assert within_gpu_budget(p, 4, gpus_per_replica=2).action.params == {"add_replicas": 2}
    # none free: one is left for the guardrails to refuse with their reason, never zero
    assert within_gpu_budget(p, 0).action.params == {"add_replicas": 1}
    [tp] = plan([_finding(Action("scale_out", "hot", {"tensor_parallel_size": 2}), "capacity_scale_out")])
    assert within_gpu_budget(tp, 0) is tp


def test_the_doctor_plans_the_trimmed_count(tmp_path: Path) -> None:
    rem = remediator(_config("dry-run"), tmp_path)  # hot and hot-2 hold GPUs 0 and 1 of the pool: 2 spare
    [rec] = asyncio.run(rem.fix([_finding(ADD3)], {}))
    assert rec.status == "planned" and rec.action["params"] == {"add_replicas": 2}, rec
    assert "trimmed from 3 to 2" in rec.action["description"]


def test_scale_in_is_a_launcher_kind_undone_by_a_scale_out_and_names_its_replica(tmp_path: Path) -> None:
    kind = ACTION_TABLE["scale_in"]
    assert (kind.actuator, kind.inverse, kind.scope) == ("launcher", "scale_out", "engine")
    assert verify_spec("capacity_scale_in", "scale_in") is None
    g = Guardrails(tmp_path / "state", _config(), clock=lambda: 1_900_000_000.0)  # type: ignore[arg-type]
    for params, ok in (({"remove_replica": "hot-r2"}, True), ({}, False), ({"remove_replica": "hot"}, False),
                       ({"remove_replica": 3}, False)):
        [p] = plan([_finding(Action("scale_in", "hot", params), "capacity_scale_in")])
        d = g.check(p, engines_total=2)
        assert d.allowed is ok, (params, d)
        if not ok:
            assert d.guard == "bounds" and "remove_replica" in d.reason
