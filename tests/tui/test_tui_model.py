"""The state document as the screens read it: rows, colours at the playbooks' thresholds, the router's policy line,
what a decision will change, and the `--once` frame."""

from __future__ import annotations

import copy

from playbooks.kv_pressure import KvPressure
from playbooks.queue_pressure import QueuePressure
from tests.tui.recorded import NOW, STATE
from tui.cells import FLEET_COLUMNS, cell, policy_line, spark
from tui.decision import Frozen, allowed
from tui.frame import frame
from tui.model import parse_state
from tui.thresholds import judge


def test_the_state_parses_into_rows_worst_first() -> None:
    s = parse_state(STATE)
    assert [e.name for e in s.engines] == ["hot", "cold"]
    assert [(f.playbook, f.status) for f in s.findings] == [("long_prompt_share", "firing"), ("kv_pressure", "pending")]
    assert [a.id for a in s.actions] == ["run-pending0001", "run-verified001"]
    assert s.action_for(s.findings[0]) == s.actions[0]
    assert s.policy is not None and s.policy["length_limit_tokens"] == 8192


def test_garbage_parses_to_empty_not_an_exception() -> None:
    s = parse_state({"engines": [1, {"name": "x", "signals": "no"}], "findings": "x", "actions": None,
                     "router": {"url": "http://r", "policy": {"error": "HTTP 401"}}})
    assert [e.name for e in s.engines] == ["x"] and s.findings == () and s.actions == ()
    assert s.policy is None and s.router_error == "HTTP 401"


def test_colours_follow_the_playbooks_own_thresholds() -> None:
    doc = copy.deepcopy(STATE)
    hot = parse_state(doc).engines[0]
    assert judge("kv_cache_usage", hot) == "warn"  # 82% >= kv_pressure's 75%
    assert judge("waiting", hot) == "warn"  # 7 > queue_pressure's 5
    assert judge("p99_ttft_s", hot) == "warn"  # 2.9 s > 2x the median of its history
    assert judge("prefix_cache_hit_rate", hot) == ""
    cold = parse_state(doc).engines[1]
    assert judge("kv_cache_usage", cold) == "" and judge("batch_utilization", cold) == ""  # nobody waits
    doc["engines"][0]["signals"]["kv_cache_usage"] = KvPressure.defaults["critical_kv_usage_ratio"]
    doc["engines"][0]["signals"]["waiting"] = QueuePressure.defaults["waiting"]
    hot = parse_state(doc).engines[0]
    assert judge("kv_cache_usage", hot) == "crit" and judge("waiting", hot) == ""  # at, not over
    kv = next(c for c in FLEET_COLUMNS if c.key == "kv")
    assert cell(kv, hot).plain == "95%!!"  # the mark reads without colour


def test_sparklines_scale_to_their_max() -> None:
    assert spark([0, 1, 2, 4], 3) == "▃▅█" and spark([], 5) == "" and spark([0, 0], 5) == "▁▁"


def test_the_router_policy_line() -> None:
    line = policy_line(parse_state(STATE), NOW).plain
    assert "route>16384 tok" in line and "LIMIT 8192 tok, 30m left, 12 refused" in line
    assert "hot:active cold:active" in line
    assert "policy unreadable (HTTP 401)" in policy_line(parse_state(
        {"router": {"url": "http://r", "policy": {"error": "HTTP 401"}}}), NOW).plain


def test_what_a_decision_will_change_is_said_exactly() -> None:
    s = parse_state(STATE)
    pending, verified = s.actions
    assert allowed("approve", pending) is None and allowed("rollback", pending) is not None
    assert allowed("approve", verified) == "run-verified001 is verified, not pending"
    assert allowed("rollback", verified) is None
    body = "\n".join(Frozen("approve", pending, s.findings[0], NOW).lines())
    assert "length_limit on router(max_prompt_tokens=8192, expires_s=3600)" in body
    assert "verify: long_prompt_share down to 0.05 within 120.0s".lower() in body.lower()
    back = "\n".join(Frozen("rollback", verified, None, NOW).lines())
    assert "inverse now:\n  length_limit on router(max_prompt_tokens=None)" in back
    assert "Nothing changes on the fleet" in "\n".join(Frozen("reject", pending, None, NOW).lines())


def test_the_once_frame() -> None:
    text = frame(parse_state(STATE), source="recorded", now=NOW, width=160)
    lines = text.splitlines()
    assert lines[0].startswith("doctor tui — recorded — status critical")
    assert any(line.startswith("hot ") and "82%!" in line for line in lines)
    assert "[CRITICAL] hot/long_prompt_share: 52% of the hot engine's prompts" in text
    assert "because long_prompt_share = 0.52 (> 0.05 over 20s)" in text
    assert "[PENDING warning] hot/kv_pressure" in text
    assert "actions waiting for approval: 1" in text and "\x1b[" not in text


def test_a_standby_replica_says_so_and_a_lone_daemon_says_nothing() -> None:
    standby = {**STATE, "leader": {"role": "standby", "store": "etcd", "holder": "b",
                                   "why": "the lease is held by b (fence 7)"}}
    s = parse_state(standby)
    assert (s.leader_role, s.leader_why) == ("standby", "the lease is held by b (fence 7)")
    first = frame(s, source="recorded", now=NOW, width=160).splitlines()[0]
    assert first.endswith(", STANDBY (another replica acts: the lease is held by b (fence 7))")
    leader = parse_state({**STATE, "leader": {"role": "leader", "store": "etcd", "why": None}})
    assert leader.leader_role == "leader" and leader.leader_why is None
    assert frame(leader, source="recorded", now=NOW, width=160).splitlines()[0].endswith(", leader")
    alone = parse_state({**STATE, "leader": {"role": "leader", "store": None, "why": "no [serve.leader]"}})
    assert alone.leader_role is None
    assert "leader" not in frame(alone, source="recorded", now=NOW, width=160).splitlines()[0]
    assert parse_state({**STATE, "leader": "garbage"}).leader_role is None
