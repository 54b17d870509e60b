"""cold_start: a recent (re)start with first-token latency far above steady state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.types import Event, Signals
from playbooks.base import EngineView
from playbooks.cold_start import PLAYBOOK
from playbooks.evaluate import evaluate
from playbooks.model import ACTION_KINDS, confidence_from


class History:
    def __init__(self, **baselines: float) -> None:
        self.baselines = baselines

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return []

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        return self.baselines.get(signal)


def view(values: Mapping[str, float | None], *, active: bool = False, events: tuple[Event, ...] = (),
         **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=values, events=events)
    return EngineView(name="hot", role="hot", signals=signals, params=dict(PLAYBOOK.defaults), now=1000.0,
                      active=active, **kw)


def test_fires_after_restart_over_3x_baseline() -> None:
    cond = PLAYBOOK.check(view({"uptime_s": 120.0, "p99_ttft_s": 1.6}, history=History(p99_ttft_s=0.4)))
    assert cond is not None
    up, ttft = cond.evidence
    assert (up.signal, up.value, up.threshold, up.comparison) == ("uptime_s", 120.0, 600.0, "<")
    assert ttft.signal == "p99_ttft_s" and ttft.threshold == pytest.approx(1.2) and "4.0x" in ttft.note
    assert "120 s ago" in cond.summary
    assert PLAYBOOK.severity == "info"


def test_silent_below_3x_baseline_or_long_after_start() -> None:
    hist = History(p99_ttft_s=0.4)
    assert PLAYBOOK.check(view({"uptime_s": 120.0, "p99_ttft_s": 1.1}, history=hist)) is None
    assert PLAYBOOK.check(view({"uptime_s": 600.0, "p99_ttft_s": 5.0}, history=hist)) is None


def test_absolute_threshold_without_baseline() -> None:
    cond = PLAYBOOK.check(view({"uptime_s": 30.0, "p99_ttft_s": 2.5}))
    assert cond is not None and cond.evidence[1].threshold == 2.0
    assert PLAYBOOK.check(view({"uptime_s": 30.0, "p99_ttft_s": 1.9})) is None
    with_base = PLAYBOOK.check(view({"uptime_s": 30.0, "p99_ttft_s": 2.5}, history=History(p99_ttft_s=0.5)))
    assert with_base is not None
    # a baseline makes the comparison (and the finding) surer
    assert confidence_from(with_base.agreeing, with_base.considered) > confidence_from(cond.agreeing, cond.considered)


def test_start_up_log_line_when_uptime_is_unknown() -> None:
    start = Event("startup_config", "hot", 900.0, "non-default args: {'max_num_seqs': 64}")
    cond = PLAYBOOK.check(view({"uptime_s": None, "p99_ttft_s": 3.0}, events=(start,)))
    assert cond is not None and cond.evidence[0].comparison == "present"
    old = Event("startup_config", "hot", 100.0, "non-default args")
    assert PLAYBOOK.check(view({"p99_ttft_s": 3.0}, events=(old,))) is None


def test_hysteresis() -> None:
    values = {"uptime_s": 620.0, "p99_ttft_s": 2.5}
    assert PLAYBOOK.check(view(values)) is None
    assert PLAYBOOK.check(view(values, active=True)) is not None
    assert PLAYBOOK.check(view({"uptime_s": 100.0, "p99_ttft_s": 1.9}, active=True)) is not None
    assert PLAYBOOK.check(view({"uptime_s": 100.0, "p99_ttft_s": 1.7}, active=True)) is None


@pytest.mark.parametrize("values", [{}, {"uptime_s": 10.0, "p99_ttft_s": None}, {"uptime_s": None, "p99_ttft_s": 9.0}])
def test_none_never_fires(values: dict[str, float | None]) -> None:
    assert PLAYBOOK.check(view(values, history=History(p99_ttft_s=0.1))) is None


def test_silent_while_the_doctor_relaunches_it() -> None:
    assert PLAYBOOK.check(view({"uptime_s": 10.0, "p99_ttft_s": 9.0}, change_in_progress=True)) is None


def test_remedy_warm_up() -> None:
    v = view({"uptime_s": 10.0, "p99_ttft_s": 9.0})
    cond = PLAYBOOK.check(v)
    assert cond is not None
    (action,) = PLAYBOOK.remedies(v, cond)
    assert action.kind == "warm_up" and action.kind in ACTION_KINDS and action.target == "hot"
    assert dict(action.params) == {"batches": [4, 8, 16], "prompt_tokens": [512, 1024, 2048]}


def test_evaluate_reports_at_once() -> None:
    assert PLAYBOOK.for_s == 0.0  # a cold start is over in minutes: report it on the first sight
    found = evaluate([view({"uptime_s": 10.0, "p99_ttft_s": 9.0})], {}, now=1000.0, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity, f.remedies[0].kind) for f in found] == [("cold_start", "info", "warm_up")]
