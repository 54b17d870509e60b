"""throughput_drop: throughput below its own baseline while demand holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import EngineConfigView, Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.model import ACTION_KINDS, confidence_from
from playbooks.throughput_drop import PLAYBOOK


class History:
    """Baselines per signal; records what it was asked."""

    def __init__(self, **baselines: float | None) -> None:
        self.baselines = baselines
        self.asked: list[tuple[str, float, float]] = []

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return []

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        self.asked.append((signal, window_s, exclude_recent_s))
        return self.baselines.get(signal)


BASE = {"generation_tokens_per_s": 1000.0, "qps": 10.0}


def view(values: Mapping[str, float | None], *, history: Any = None, active: bool = False, **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=values)
    return EngineView(name="hot", role="hot", signals=signals, params=dict(PLAYBOOK.defaults), now=5000.0,
                      history=history if history is not None else History(**BASE), active=active, **kw)


def test_fires_when_tokens_drop_and_requests_wait() -> None:
    hist = History(**BASE)
    cond = PLAYBOOK.check(view({"generation_tokens_per_s": 700.0, "waiting": 3.0}, history=hist))
    assert cond is not None
    ev = cond.evidence[0]
    assert (ev.signal, ev.value, ev.threshold, ev.comparison) == ("generation_tokens_per_s", 700.0, 750.0, "<")
    assert "baseline 1000" in ev.note
    assert cond.evidence[1].signal == "waiting"
    assert ("generation_tokens_per_s", 3600.0, 600.0) in hist.asked
    assert "30% below" in cond.summary


def test_demand_from_qps_holding_up() -> None:
    cond = PLAYBOOK.check(view({"generation_tokens_per_s": 600.0, "waiting": 0.0, "qps": 9.0}))
    assert cond is not None and cond.evidence[1].signal == "qps"


def test_silent_when_demand_fell_too() -> None:
    # a quiet hour: requests per second fell by as much as tokens did, nothing waits
    assert PLAYBOOK.check(view({"generation_tokens_per_s": 600.0, "waiting": 0.0, "qps": 6.0})) is None
    # demand cannot be told at all
    assert PLAYBOOK.check(view({"generation_tokens_per_s": 600.0})) is None


@pytest.mark.parametrize("tokens", [750.0, 800.0, 1200.0])
def test_silent_at_or_above_threshold(tokens: float) -> None:
    assert PLAYBOOK.check(view({"generation_tokens_per_s": tokens, "waiting": 5.0})) is None


def test_hysteresis() -> None:
    values = {"generation_tokens_per_s": 760.0, "waiting": 2.0}  # 24% below: inside the relaxed band
    assert PLAYBOOK.check(view(values)) is None
    assert PLAYBOOK.check(view(values, active=True)) is not None
    assert PLAYBOOK.check(view({"generation_tokens_per_s": 790.0, "waiting": 2.0}, active=True)) is None


def test_no_baseline_no_finding() -> None:
    assert PLAYBOOK.check(view({"generation_tokens_per_s": 10.0, "waiting": 9.0}, history=History())) is None
    # an idle baseline says nothing either
    idle = History(generation_tokens_per_s=0.2, qps=0.0)
    assert PLAYBOOK.check(view({"generation_tokens_per_s": 0.0, "waiting": 9.0}, history=idle)) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"generation_tokens_per_s": None, "qps": None, "waiting": None})) is None
    assert PLAYBOOK.check(view({"generation_tokens_per_s": 500.0, "waiting": None, "qps": None})) is None


def test_falls_back_to_qps_when_token_counters_are_missing() -> None:
    cond = PLAYBOOK.check(view({"qps": 5.0, "waiting": 4.0}))
    assert cond is not None and cond.evidence[0].signal == "qps" and "requests/s" in cond.summary
    # QPS cannot be both the throughput and the demand: without waiting there is no finding
    assert PLAYBOOK.check(view({"qps": 5.0, "waiting": 0.0})) is None


def test_supporting_batch_and_dram_raise_confidence() -> None:
    plain = PLAYBOOK.check(view({"generation_tokens_per_s": 600.0, "waiting": 2.0,
                                 "batch_utilization": 0.9, "dram_utilization": 0.8}))
    both = PLAYBOOK.check(view({"generation_tokens_per_s": 600.0, "waiting": 2.0,
                                "batch_utilization": 0.3, "dram_utilization": 0.2}))
    assert plain is not None and both is not None
    assert confidence_from(both.agreeing, both.considered) > confidence_from(plain.agreeing, plain.considered)
    assert {e.signal for e in both.evidence} >= {"batch_utilization", "dram_utilization"}


def test_remedies_raise_batch_timeout_when_batches_do_not_fill() -> None:
    v = view({"generation_tokens_per_s": 600.0, "waiting": 2.0, "batch_utilization": 0.3, "running": 8.0},
             config=EngineConfigView(max_num_seqs=64, router_max_in_flight=16))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    actions = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in actions] == ["set_batch_timeout", "set_max_in_flight"]
    assert actions[0].target == "router" and actions[0].params == {"engine": "hot", "batch_timeout_ms": 200}
    assert actions[1].params == {"engine": "hot", "max_in_flight": 20}
    assert all(a.kind in ACTION_KINDS for a in actions)


def test_remedies_lower_batch_timeout_when_batches_are_full() -> None:
    v = view({"generation_tokens_per_s": 600.0, "waiting": 2.0, "batch_utilization": 0.95, "running": 60.0},
             config=EngineConfigView(max_num_seqs=64))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    actions = PLAYBOOK.remedies(v, cond)
    assert actions[0].params["batch_timeout_ms"] == 50
    assert actions[1].params["max_in_flight"] == 64  # never above max_num_seqs


def test_no_max_in_flight_raise_when_already_at_max_num_seqs() -> None:
    v = view({"generation_tokens_per_s": 600.0, "waiting": 2.0}, config=EngineConfigView(max_num_seqs=32,
                                                                                          router_max_in_flight=32))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    assert [a.kind for a in PLAYBOOK.remedies(v, cond)] == ["set_batch_timeout"]


def test_evaluate_for_duration_and_severity() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"generation_tokens_per_s": 600.0, "waiting": 2.0})
    assert evaluate([v], state, now=0.0, playbooks=[PLAYBOOK]) == []
    found = evaluate([v], state, now=PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in found] == [("throughput_drop", "warning")]
    assert found[0].remedies[0].kind == "set_batch_timeout"
