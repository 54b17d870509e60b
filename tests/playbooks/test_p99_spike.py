"""p99_spike: tail latency over its SLO (critical) or 2x its baseline (warning), with its likely causes."""

from __future__ import annotations

from typing import Any

from collectors.types import Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.model import confidence_from
from playbooks.p99_spike import PLAYBOOK, round_threshold


class History:
    """Baselines by signal; records the arguments it was asked with."""

    def __init__(self, baselines: dict[str, float]) -> None:
        self.baselines = baselines
        self.asked: list[tuple[str, float, float]] = []

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return []

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        self.asked.append((signal, window_s, exclude_recent_s))
        return self.baselines.get(signal)


def view(values: dict[str, Any], *, active: bool = False, slo: dict[str, float] | None = None,
         history: History | None = None, role: str = "hot", templates: bool = False) -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values=values)
    return EngineView(name="hot", role=role, signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0, active=active,
                      slo=slo or {}, history=history or History({}), templates_configured=templates)


SLO = {"p99_ttft_s": 2.0, "p99_e2e_s": 20.0}


def test_over_slo_is_critical_with_length_limit_first() -> None:
    v = view({"p99_ttft_s": 2.5, "p99_e2e_s": 10.0, "very_long_prompt_share": 0.12, "prefix_cache_hit_rate": 0.9},
             slo=SLO)
    cond = PLAYBOOK.check(v)
    assert cond is not None and cond.severity == "critical"
    assert cond.summary == "p99_ttft_s 2.5s over its SLO with long prompts"
    by_signal = {e.signal: e for e in cond.evidence}
    assert (by_signal["p99_ttft_s"].value, by_signal["p99_ttft_s"].threshold) == (2.5, 2.0)
    assert "SLO p99_ttft_s" in by_signal["p99_ttft_s"].note
    assert by_signal["very_long_prompt_share"].value == 0.12
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["length_limit", "set_route_threshold"]
    assert remedies[0].target == "router" and remedies[0].params == {"max_tokens": 8192, "expires_in_s": 3600}
    assert remedies[1].params == {"threshold_tokens": 4096} and remedies[1].inverse == {"threshold_tokens": 5120}


def test_slo_threshold_is_strict_and_silent_below() -> None:
    assert PLAYBOOK.check(view({"p99_ttft_s": 2.0, "p99_e2e_s": 20.0}, slo=SLO)) is None
    assert PLAYBOOK.check(view({"p99_ttft_s": 2.01}, slo=SLO)) is not None


def test_no_slo_and_no_history_never_fires() -> None:
    assert PLAYBOOK.check(view({"p99_ttft_s": 50.0, "p99_e2e_s": 500.0})) is None


def test_over_twice_the_baseline_is_a_warning() -> None:
    history = History({"p99_ttft_s": 0.5, "p99_e2e_s": 8.0})
    v = view({"p99_ttft_s": 1.2, "p99_e2e_s": 9.0, "qps": 1.0}, history=history)
    cond = PLAYBOOK.check(v)
    assert cond is not None and cond.severity == "warning"
    [e] = cond.evidence
    assert (e.signal, e.value, e.threshold) == ("p99_ttft_s", 1.2, 1.0) and "2x its baseline 0.5s" in e.note
    assert ("p99_ttft_s", 3600.0, 600.0) in history.asked
    assert PLAYBOOK.check(view({"p99_ttft_s": 1.0, "qps": 1.0}, history=history)) is None


def test_few_requests_need_twice_the_jump() -> None:
    history = History({"p99_ttft_s": 0.5})
    # 0.05 req/s over 60 s = 3 requests: their P99 is the slowest one, so 2x is not enough, 4x is.
    assert PLAYBOOK.check(view({"p99_ttft_s": 1.2, "qps": 0.05}, history=history)) is None
    cond = PLAYBOOK.check(view({"p99_ttft_s": 2.5, "qps": 0.05}, history=history))
    assert cond is not None and "3 requests: few" in cond.evidence[0].note


def test_baseline_ignores_tiny_latencies() -> None:
    # 0.2 s is 4x a 50 ms baseline, but under baseline_min_s (0.25 s): not a degradation worth a warning
    assert PLAYBOOK.check(view({"p99_ttft_s": 0.2}, history=History({"p99_ttft_s": 0.05}))) is None


def test_peer_checks_p95_ttft_and_tpot_slos() -> None:
    cond = PLAYBOOK.check(view({"p95_ttft_s": 0.9, "p95_itl_s": 0.12}, slo={"p95_ttft_s": 0.5, "p95_tpot_s": 0.1}))
    assert cond is not None and cond.severity == "critical"
    assert {e.signal for e in cond.evidence} == {"p95_ttft_s", "p95_itl_s"}
    tpot = next(e for e in cond.evidence if e.signal == "p95_itl_s")
    assert tpot.threshold == 0.1 and "p95_tpot_s" in tpot.note


def test_low_prefix_hit_rate_with_templates_puts_rewarm_first() -> None:
    v = view({"p99_ttft_s": 3.0, "very_long_prompt_share": 0.0, "prefix_cache_hit_rate": 0.3}, slo=SLO,
             templates=True)
    cond = PLAYBOOK.check(v)
    assert cond is not None and "low prefix-cache hit rate" in cond.summary
    assert any(e.signal == "prefix_cache_hit_rate" and e.threshold == 0.6 for e in cond.evidence)
    # no prompt over the limit reaches the engine: the limit would change nothing and is not proposed
    assert [a.kind for a in PLAYBOOK.remedies(v, cond)] == ["rewarm_prefix_cache", "set_route_threshold"]


def test_length_limit_only_where_it_can_change_something() -> None:
    known_none = view({"p99_ttft_s": 3.0, "very_long_prompt_share": 0.0}, slo=SLO)
    unknown = view({"p99_ttft_s": 3.0}, slo=SLO)
    cond_none, cond_unknown = PLAYBOOK.check(known_none), PLAYBOOK.check(unknown)
    assert cond_none is not None and cond_unknown is not None
    assert [a.kind for a in PLAYBOOK.remedies(known_none, cond_none)] == ["set_route_threshold"]
    assert [a.kind for a in PLAYBOOK.remedies(unknown, cond_unknown)] == ["length_limit", "set_route_threshold"]
    cold = view({"p99_ttft_s": 3.0, "very_long_prompt_share": 0.0}, slo=SLO, role="cold")
    cond_cold = PLAYBOOK.check(cold)
    assert cond_cold is not None and PLAYBOOK.remedies(cold, cond_cold) == []


def test_low_prefix_hit_rate_counts_when_it_fell_from_its_baseline() -> None:
    fell = view({"p99_ttft_s": 3.0, "prefix_cache_hit_rate": 0.3}, slo=SLO,
                history=History({"prefix_cache_hit_rate": 0.85}))
    never = view({"p99_ttft_s": 3.0, "prefix_cache_hit_rate": 0.3}, slo=SLO)
    cond_fell, cond_never = PLAYBOOK.check(fell), PLAYBOOK.check(never)
    assert cond_fell is not None and cond_never is not None
    assert "down from a baseline of 85%" in cond_fell.evidence[-1].note
    assert all(e.signal != "prefix_cache_hit_rate" for e in cond_never.evidence)  # random prompts: normal
    assert confidence_from(cond_fell.agreeing, cond_fell.considered) > confidence_from(
        cond_never.agreeing, cond_never.considered)


def test_cold_engine_gets_no_route_threshold_move() -> None:
    v = view({"p99_e2e_s": 30.0, "very_long_prompt_share": 0.5}, slo=SLO, role="cold")
    cond = PLAYBOOK.check(v)
    assert cond is not None
    assert [a.kind for a in PLAYBOOK.remedies(v, cond)] == ["length_limit"]


def test_hysteresis_keeps_an_active_finding_slightly_below_the_slo() -> None:
    assert PLAYBOOK.check(view({"p99_ttft_s": 1.9}, slo=SLO)) is None
    assert PLAYBOOK.check(view({"p99_ttft_s": 1.9}, slo=SLO, active=True)) is not None
    assert PLAYBOOK.check(view({"p99_ttft_s": 1.7}, slo=SLO, active=True)) is None


def test_none_values_never_fire() -> None:
    history = History({"p99_ttft_s": 0.5, "p99_e2e_s": 2.0})
    assert PLAYBOOK.check(view({}, slo=SLO, history=history)) is None
    none = dict.fromkeys(("p99_ttft_s", "p99_e2e_s", "very_long_prompt_share", "prefix_cache_hit_rate"))
    assert PLAYBOOK.check(view(none, slo=SLO, history=history)) is None
    cond = PLAYBOOK.check(view({"p99_ttft_s": 5.0, "very_long_prompt_share": None, "prefix_cache_hit_rate": None},
                               slo=SLO))
    assert cond is not None and [e.signal for e in cond.evidence] == ["p99_ttft_s"]


def test_round_threshold() -> None:
    assert round_threshold(5120 * 0.8) == 4096
    assert round_threshold(1000) == 1024


def test_evaluate_reports_only_after_for_s() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view({"p99_ttft_s": 4.0, "very_long_prompt_share": 0.2}, slo=SLO)
    assert evaluate([v], state, now=1000.0, playbooks=[PLAYBOOK]) == []
    findings = evaluate([v], state, now=1000.0 + PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in findings] == [("p99_spike", "critical")]
    assert findings[0].remedies[0].kind == "length_limit"
