"""hot_decode_jitter: the hot engine's inter-token latency CV above 10% (the router's measure preferred) with a
stretched tail."""

from __future__ import annotations

from typing import Any

from collectors.types import EngineConfigView, Signals
from playbooks.base import EngineView
from playbooks.evaluate import evaluate
from playbooks.hot_decode_jitter import PLAYBOOK
from playbooks.model import confidence_from


def view(values: dict[str, Any], *, active: bool = False, role: str = "hot",
         config: EngineConfigView | None = None) -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values=values,
                  reasons={"itl_cv": "estimated from bucket midpoints: bucket resolution limits it"})
    return EngineView(name="hot", role=role, signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0, active=active,
                      config=config or EngineConfigView(max_num_batched_tokens=8192, max_num_seqs=128))


# what the simulator's hot engine shows: healthy (CV 0.2-1.0 from bucket midpoints, P95 < 2x the median) and
# with 3K-5K-token prompts reaching it (CV 1.6, P95 5-13x the median)
HEALTHY = {"itl_cv": 0.97, "p50_itl_s": 0.038, "p95_itl_s": 0.066}
JITTER = {"itl_cv": 1.63, "p50_itl_s": 0.042, "p95_itl_s": 0.546}


def test_engine_itl_cv_with_a_stretched_tail_fires_with_route_threshold_first() -> None:
    v = view(JITTER)
    cond = PLAYBOOK.check(v)
    assert cond is not None and PLAYBOOK.severity == "warning"
    assert cond.summary == "hot inter-token latency varies 163% (CV, itl_cv); P95 13.0x the median"
    cv, tail = cond.evidence
    assert (cv.signal, cv.value, cv.threshold) == ("itl_cv", 1.63, 0.1)
    assert "no router measure" in cv.note and "bucket resolution" in cv.note
    assert tail.threshold == 4.0 and abs(float(tail.value or 0) - 13.0) < 0.01 and "546 ms" in tail.note
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["set_route_threshold", "relaunch"]
    assert remedies[0].target == "router" and remedies[0].params == {"threshold_tokens": 4096}
    assert remedies[1].params == {"max_num_batched_tokens": 4096}
    assert remedies[1].inverse == {"max_num_batched_tokens": 8192}


def test_healthy_engine_histogram_cv_alone_does_not_fire() -> None:
    assert PLAYBOOK.check(view(HEALTHY)) is None
    assert PLAYBOOK.check(view({"itl_cv": 0.97})) is None  # no quantiles: the coarse CV alone says nothing


def test_router_measure_is_preferred() -> None:
    # the router sees steady decoding: the engine's coarse histogram estimate does not fire on its own
    assert PLAYBOOK.check(view({"router_itl_cv": 0.05, **JITTER})) is None
    cond = PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.2, "itl_cv": 0.05}))
    assert cond is not None and [e.signal for e in cond.evidence] == ["router_itl_cv", "p95_itl_s / p50_itl_s"]
    assert "router" in cond.evidence[0].note and "router" in cond.summary
    assert cond.summary == "hot inter-token latency varies 20% (CV, router); P95 13.0x the median"


def test_router_spread_of_a_healthy_busy_engine_does_not_fire() -> None:
    # measured on the simulator's hot engine behind the router, no long prompts: CV 0.52 at 4.5 QPS, and
    # the engine's P95 under 2x its median; prefill steps spread the gaps, nothing stutters
    assert PLAYBOOK.check(view({"router_itl_cv": 0.52, **HEALTHY})) is None
    assert PLAYBOOK.check(view({"router_itl_cv": 0.52})) is None  # no quantiles: spread alone says nothing


def test_agreeing_measures_raise_confidence() -> None:
    one = PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.2, "itl_cv": 0.05}))
    both = PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.2, "itl_cv": 0.3}))
    assert one is not None and both is not None and len(both.evidence) == 3
    assert confidence_from(both.agreeing, both.considered) > confidence_from(one.agreeing, one.considered)


def test_thresholds_are_strict() -> None:
    assert PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.1})) is None
    assert PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.11})) is not None
    assert PLAYBOOK.check(view({**JITTER, "itl_cv": 0.1})) is None
    assert PLAYBOOK.check(view({**JITTER, "p95_itl_s": 0.168})) is None  # exactly 4x
    assert PLAYBOOK.check(view({**JITTER, "p95_itl_s": 0.169})) is not None
    assert PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.3, "p95_itl_s": 0.168})) is None
    # an overloaded engine (qps_surge in the simulator: P95 3.3x the median) is capacity_scale_out's case
    assert PLAYBOOK.check(view({"itl_cv": 1.13, "p50_itl_s": 0.04, "p95_itl_s": 0.132})) is None


def test_only_for_hot_engines() -> None:
    assert not PLAYBOOK.applies_to(view({}, role="cold"))


def test_batched_tokens_never_go_below_max_num_seqs_or_the_floor() -> None:
    v = view(JITTER, config=EngineConfigView(max_num_batched_tokens=1024, max_num_seqs=768))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    assert PLAYBOOK.remedies(v, cond)[1].params == {"max_num_batched_tokens": 768}
    small = view(JITTER, config=EngineConfigView(max_num_batched_tokens=512))
    assert [a.kind for a in PLAYBOOK.remedies(small, cond)] == ["set_route_threshold"]
    unknown = view(JITTER, config=EngineConfigView())
    assert PLAYBOOK.remedies(unknown, cond)[1].params == {"max_num_batched_tokens": "lower"}


def test_hysteresis_keeps_an_active_finding_slightly_below() -> None:
    assert PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.095})) is None
    assert PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.095}, active=True)) is not None
    assert PLAYBOOK.check(view({**JITTER, "router_itl_cv": 0.08}, active=True)) is None
    near = {**JITTER, "p95_itl_s": 0.042 * 3.8}  # 3.8x: under 4x, over 4x * 0.9
    assert PLAYBOOK.check(view(near)) is None
    assert PLAYBOOK.check(view(near, active=True)) is not None


def test_bad_quantiles_do_not_crash() -> None:
    assert PLAYBOOK.check(view({**JITTER, "p50_itl_s": 0.0})) is None
    assert PLAYBOOK.check(view({**JITTER, "p50_itl_s": None})) is None


def test_none_values_never_fire() -> None:
    assert PLAYBOOK.check(view({})) is None
    assert PLAYBOOK.check(view({"itl_cv": None, "router_itl_cv": None, "p50_itl_s": None, "p95_itl_s": None})) is None


def test_evaluate_reports_only_after_for_s() -> None:
    state: dict[str, dict[str, Any]] = {}
    v = view(JITTER)
    assert evaluate([v], state, now=1000.0, playbooks=[PLAYBOOK]) == []
    findings = evaluate([v], state, now=1000.0 + PLAYBOOK.for_s, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in findings] == [("hot_decode_jitter", "warning")]
    assert findings[0].remedies[0].kind == "set_route_threshold"
