"""The planner: first remedy per finding, one action per target, severity then playbook precedence."""

from __future__ import annotations

import re

import pytest

from doctor.remedy import planner
from doctor.remedy.planner import Planned, conflicts, normalise, plan, plan_all, verify_spec
from playbooks import registry
from playbooks.model import ACTION_KINDS, Action, Finding


def finding(playbook: str, engine: str, *remedies: Action, severity: str = "warning",
            confidence: float = 0.8, onset: float = 1000.0) -> Finding:
    return Finding(playbook=playbook, engine=engine, severity=severity, confidence=confidence,  # type: ignore[arg-type]
                   summary=f"{playbook} on {engine}", evidence=(), remedies=tuple(remedies), runbook="",
                   onset=onset)


def length_limit(tokens: int = 8192) -> Action:
    return Action("length_limit", "router", {"max_tokens": tokens, "expires_in_s": 3600}, inverse={"max_tokens": None})


def route_threshold(tokens: int = 4096) -> Action:
    return Action("set_route_threshold", "router", {"threshold_tokens": tokens}, inverse={"threshold_tokens": 5120})


def max_in_flight(engine: str, n: int = 8) -> Action:
    return Action("set_max_in_flight", "router", {"engine": engine, "max_in_flight": n},
                  inverse={"engine": engine, "max_in_flight": 256})


def relaunch(engine: str, seqs: int = 64) -> Action:
    return Action("relaunch", engine, {"max_num_seqs": seqs}, inverse={"max_num_seqs": 128}, risk="medium")


def escalate(engine: str) -> Action:
    return Action("escalate", engine, {"reason": "look"})


def by_playbook(plans: list[Planned]) -> dict[str, Planned]:
    return {p.playbook: p for p in plans}


def test_first_remedy_of_each_finding_and_its_target() -> None:
    plans = plan([finding("kv_pressure", "hot", relaunch("hot"), max_in_flight("hot")),
                  finding("memory_fragmentation", "cold", Action("defragment", "cold", {"sleep_level": 1}))])
    got = by_playbook(plans)
    assert got["kv_pressure"].kind == "relaunch" and got["kv_pressure"].target == "hot"
    assert got["memory_fragmentation"].kind == "defragment" and got["memory_fragmentation"].target == "cold"
    assert got["kv_pressure"].engines == ("hot",)
    assert got["kv_pressure"].verify == verify_spec("kv_pressure", "relaunch")


def test_targets_router_wide_and_engine_scoped() -> None:
    assert normalise(length_limit())[1] == "router"
    assert normalise(route_threshold())[1] == "router"
    # the router's batch timeout is global: engine is informational, so the action is router-wide
    assert normalise(Action("set_batch_timeout", "router", {"engine": "hot", "batch_timeout_ms": 100}))[1] == "router"
    assert normalise(max_in_flight("hot"))[1] == "router:hot"
    assert normalise(Action("stop_routing", "router", {"engine": "cold"}))[1] == "router:cold"
    assert normalise(relaunch("cold"))[1] == "cold"


def test_router_action_proposed_on_the_engine_is_normalised() -> None:
    # kv_pressure proposes set_max_in_flight with the engine as its target
    odd = Action("set_max_in_flight", "hot", {"max_in_flight": 6}, inverse={"max_in_flight": None})
    (p,) = plan([finding("kv_pressure", "hot", odd)])
    assert p.target == "router:hot"
    assert p.action.target == "router" and dict(p.action.params) == {"engine": "hot", "max_in_flight": 6}
    assert p.action.inverse == {"engine": "hot", "max_in_flight": None}
    assert p.verify is not None and p.verify.signal == "preemptions_per_s"


def test_most_severe_finding_wins_a_router_conflict() -> None:
    warn = finding("long_prompt_share", "hot", route_threshold(), severity="warning")
    crit = finding("queue_pressure", "hot", length_limit(), severity="critical")
    plans, skipped = plan_all([warn, crit])
    assert [p.playbook for p in plans] == ["queue_pressure"]
    assert len(skipped) == 1 and skipped[0].finding is warn
    assert "superseded by" in skipped[0].reason and crit.id in skipped[0].reason
    assert plans[0].superseded and warn.id in plans[0].superseded[0]


def test_same_severity_falls_back_to_playbook_precedence() -> None:
    # registry order: p99_spike (earlier) before long_prompt_share
    assert registry.precedence("p99_spike") < registry.precedence("long_prompt_share")
    a = finding("long_prompt_share", "hot", route_threshold(3000), confidence=0.95)
    b = finding("p99_spike", "hot", length_limit(), confidence=0.5)
    assert [p.playbook for p in plan([a, b])] == ["p99_spike"]
    # a different precedence (passed in) flips it
    order = ["long_prompt_share", "p99_spike"]
    assert [p.playbook for p in plan([a, b], precedence=order.index)] == ["long_prompt_share"]


def test_order_of_findings_does_not_matter() -> None:
    fs = [finding("long_prompt_share", "hot", route_threshold()), finding("p99_spike", "cold", length_limit()),
          finding("kv_pressure", "hot", max_in_flight("hot"), severity="critical")]
    first = [(p.playbook, p.target) for p in plan(fs)]
    assert first == [(p.playbook, p.target) for p in plan(list(reversed(fs)))]


def test_only_one_router_wide_change_per_cycle_and_it_locks_the_router() -> None:
    fs = [finding("p99_spike", "hot", length_limit(), severity="critical"),
          finding("long_prompt_share", "cold", route_threshold()),
          finding("queue_pressure", "cold", max_in_flight("cold"))]
    plans, skipped = plan_all(fs)
    assert [p.target for p in plans] == ["router"]
    assert {s.finding.playbook for s in skipped} == {"long_prompt_share", "queue_pressure"}


def test_engine_scoped_router_actions_on_different_engines_both_go() -> None:
    plans = plan([finding("queue_pressure", "hot", max_in_flight("hot")),
                  finding("throughput_drop", "cold", max_in_flight("cold", 32))])
    assert sorted(p.target for p in plans) == ["router:cold", "router:hot"]


def test_one_change_per_engine_router_scoped_and_engine_actions_conflict() -> None:
    crit = finding("kv_pressure", "hot", relaunch("hot"), severity="critical")
    warn = finding("queue_pressure", "hot", max_in_flight("hot"))
    other = finding("memory_fragmentation", "cold", Action("defragment", "cold", {}))
    plans, skipped = plan_all([warn, crit, other])
    assert sorted((p.playbook, p.target) for p in plans) == [("kv_pressure", "hot"),
                                                             ("memory_fragmentation", "cold")]
    assert [s.finding.playbook for s in skipped] == ["queue_pressure"]


def test_identical_actions_collapse_into_one() -> None:
    a = finding("p99_spike", "hot", length_limit(), severity="critical")
    b = finding("queue_pressure", "cold", length_limit(), severity="critical")
    plans, skipped = plan_all([a, b])
    assert len(plans) == 1 and plans[0].playbook == "p99_spike"
    assert skipped[0].reason.startswith("the same action is already planned")


def test_escalate_only_findings_become_escalate_plans_and_never_conflict() -> None:
    fs = [finding("error_rate", "hot", escalate("hot"), severity="critical"),
          finding("cuda_oom", "hot", escalate("hot"), relaunch("hot"), severity="critical"),
          finding("kv_pressure", "hot", relaunch("hot"))]
    plans = plan(fs)
    esc = [p for p in plans if p.is_escalation]
    assert {p.playbook for p in esc} == {"error_rate", "cuda_oom"}
    assert all(p.escalate and p.verify is None and p.engines == () for p in esc)
    assert any(p.kind == "relaunch" for p in plans)  # the escalations did not take the engine


def test_stop_routing_has_no_verification_and_escalates() -> None:
    (p,) = plan([finding("gpu_fault", "hot", Action("stop_routing", "router", {"engine": "hot"}),
                         escalate("hot"), severity="critical")])
    assert p.target == "router:hot" and p.verify is None and p.escalate and not p.is_escalation


def test_findings_without_remedies_are_skipped() -> None:
    f = finding("p99_spike", "hot")
    plans, skipped = plan_all([f])
    assert plans == [] and skipped[0].reason == "the finding proposes no remedy"


def test_unregistered_playbook_ranks_last() -> None:
    plans = plan([finding("custom_thing", "hot", length_limit(), severity="critical"),
                  finding("engine_down", "cold", route_threshold(), severity="critical")])
    assert [p.playbook for p in plans] == ["engine_down"]


def test_record_from_plan() -> None:
    (p,) = plan([finding("kv_pressure", "hot", relaunch("hot"))])
    rec = p.record(trigger="webhook:VLLMKVPressure")
    assert rec.status == "planned" and rec.kind == "relaunch" and rec.target == "hot" and rec.engine == "hot"
    assert rec.finding_id == p.finding.id and rec.playbook == "kv_pressure"
    assert rec.inverse == {"max_num_seqs": 128}
    assert rec.verify == {"signal": "kv_cache_usage", "direction": "down", "target": 0.9, "ratio": None,
                          "within_s": 300.0}
    (r,) = plan([finding("p99_spike", "hot", length_limit())])
    assert r.record().engine == "hot"  # a router-wide action concerns the finding's engine


def test_conflicts_is_symmetric() -> None:
    ps = plan([finding("p99_spike", "hot", length_limit())]) + plan([finding("queue_pressure", "hot",
                                                                             max_in_flight("hot"))])
    assert conflicts(ps[0], ps[1]) and conflicts(ps[1], ps[0])


# -- the VerifySpec table

def test_every_action_kind_has_a_verify_entry_and_the_table_is_sane() -> None:
    for kind in ACTION_KINDS:
        assert ("*", kind) in planner.VERIFY, kind
    for (playbook, kind), spec in planner.VERIFY.items():
        assert kind in ACTION_KINDS
        # "advise": `doctor advise --apply`'s findings (doctor/advise/apply.py), not a registered playbook
        assert playbook in ("*", "advise") or playbook in registry.ids(), playbook
        if spec is not None:
            assert (spec.target is None) != (spec.ratio is None), (playbook, kind)
            if spec.ratio is not None:
                assert (spec.ratio < 1) == (spec.direction == "down"), (playbook, kind)
            assert spec.within_s > 0


def test_documented_table_matches_the_code() -> None:
    doc = planner.__doc__ or ""
    rows = [r for r in doc.splitlines() if r.startswith("| ") and not r.startswith("| playbook")]
    documented = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        goal = re.match(r"(ratio|target) ([\d.]+)", cells[4])
        documented[(cells[0], cells[1])] = (None if cells[2].startswith("(none") else
                                            (cells[2], cells[3], goal and goal.group(1), goal and float(goal.group(2)),
                                             float(cells[5].removesuffix(" s"))))
    actual = {}
    for key, spec in planner.VERIFY.items():
        actual[key] = None if spec is None else (spec.signal, spec.direction, "ratio" if spec.ratio else "target",
                                                 spec.ratio or spec.target, spec.within_s)
    assert documented == actual


@pytest.mark.parametrize(("playbook", "kind", "signal"), [
    ("p99_spike", "length_limit", "waiting"), ("long_prompt_share", "set_route_threshold", "p99_ttft_s"),
    ("kv_pressure", "set_max_in_flight", "preemptions_per_s"), ("kv_pressure", "relaunch", "kv_cache_usage"),
    ("memory_fragmentation", "defragment", "memory_growth_ratio"), ("cold_start", "warm_up", "p99_ttft_s"),
    ("prefix_cache_miss", "rewarm_prefix_cache", "prefix_cache_hit_rate"),
])
def test_verify_spec_examples(playbook: str, kind: str, signal: str) -> None:
    spec = verify_spec(playbook, kind)
    assert spec is not None and spec.signal == signal
