"""The playbook framework: evaluation with `for` durations, stable ids, hysteresis, rendering."""

from __future__ import annotations

from typing import Any

import pytest

from collectors.types import Event, Signals
from playbooks.base import EngineView
from playbooks.engine_down import PLAYBOOK as ENGINE_DOWN
from playbooks.evaluate import STALE_AFTER_S, evaluate
from playbooks.kv_pressure import PLAYBOOK as KV_PRESSURE
from playbooks.model import Action, Evidence, Finding, confidence_from, fingerprint, worst


def view(values: dict[str, float | None], *, health: str = "ok", events: tuple[Event, ...] = (),
         name: str = "hot", role: str = "hot", window_s: float = 30.0, now: float = 1000.0,
         params: dict[str, float] | None = None) -> EngineView:
    signals = Signals(engine=name, window_s=window_s, health=health,  # type: ignore[arg-type]
                      health_status=200 if health == "ok" else 503, values=values)
    if events:
        signals = Signals(engine=name, window_s=window_s, health=health,  # type: ignore[arg-type]
                          health_status=200 if health == "ok" else 503, values=values, events=events)
    return EngineView(name=name, role=role, signals=signals, params=params or dict(KV_PRESSURE.defaults), now=now)


PRESSURE = {"kv_cache_usage": 0.9, "preemptions_per_s": 0.5, "waiting": 3.0}


def test_for_duration_delays_the_finding_and_the_id_stays_stable() -> None:
    state: dict[str, dict[str, Any]] = {}
    found = []
    for t in range(0, 420, 60):
        found.append(evaluate([view(PRESSURE, now=1000.0 + t)], state, now=1000.0 + t, playbooks=[KV_PRESSURE]))
    assert [len(f) for f in found] == [0, 0, 0, 0, 0, 1, 1]  # 300 s after onset
    assert found[-1][0].id == found[-2][0].id == fingerprint("kv_pressure", "hot", 1000.0)
    assert found[-1][0].onset == 1000.0


def test_condition_clearing_resets_onset_and_stale_state_starts_a_new_incident() -> None:
    state: dict[str, dict[str, Any]] = {}
    evaluate([view(PRESSURE)], state, now=1000.0, playbooks=[KV_PRESSURE])
    assert "kv_pressure|hot" in state
    evaluate([view({"kv_cache_usage": 0.2})], state, now=1060.0, playbooks=[KV_PRESSURE])
    assert state == {}
    evaluate([view(PRESSURE)], state, now=2000.0, playbooks=[KV_PRESSURE])
    evaluate([view(PRESSURE)], state, now=2000.0 + STALE_AFTER_S + 1, playbooks=[KV_PRESSURE])
    assert state["kv_pressure|hot"]["onset"] == 2000.0 + STALE_AFTER_S + 1


def test_hysteresis_keeps_an_active_finding_just_below_threshold() -> None:
    # preemptions under the proof rate (0.05/s), so the usage threshold and its hysteresis decide
    near = {"kv_cache_usage": 0.72, "preemptions_per_s": 0.02, "waiting": 3.0}
    state: dict[str, dict[str, Any]] = {}
    assert KV_PRESSURE.check(view(near)) is None
    evaluate([view(PRESSURE)], state, now=1000.0, playbooks=[KV_PRESSURE])
    evaluate([view(near)], state, now=1060.0, playbooks=[KV_PRESSURE])
    assert "kv_pressure|hot" in state  # 0.72 > 0.75 * 0.9 while active
    evaluate([view({"kv_cache_usage": 0.6, "preemptions_per_s": 0.02})], state, now=1120.0, playbooks=[KV_PRESSURE])
    assert state == {}


def test_window_of_history_counts_as_held() -> None:
    state: dict[str, dict[str, Any]] = {}
    found = evaluate([view(PRESSURE, window_s=900.0)], state, now=5000.0, playbooks=[KV_PRESSURE],
                     window_is_history=True)
    assert len(found) == 1 and found[0].onset == 4100.0


def test_engine_down_fires_on_unreachable_unhealthy_or_death_line() -> None:
    assert ENGINE_DOWN.check(view({}, health="unreachable")) is not None
    cond = ENGINE_DOWN.check(view({}, health="unhealthy"))
    assert cond is not None and cond.evidence[0].value == 503.0
    death = Event("engine_death", "hot", 999.0, "EngineCore encountered a fatal error.")
    assert ENGINE_DOWN.check(view({}, events=(death,))) is not None
    assert ENGINE_DOWN.check(view({"qps": 3.0})) is None
    v = view({}, health="unreachable")
    v.change_in_progress = True
    assert ENGINE_DOWN.check(v) is None


def test_kv_pressure_needs_a_supporting_signal_and_is_none_safe() -> None:
    assert KV_PRESSURE.check(view({"kv_cache_usage": 0.9, "preemptions_per_s": 0.0, "waiting": 0.0})) is None
    assert KV_PRESSURE.check(view({"kv_cache_usage": None, "waiting": 10.0})) is None
    cond = KV_PRESSURE.check(view({**PRESSURE, "kv_cache_usage": 0.97}))
    assert cond is not None and cond.severity == "critical" and cond.agreeing == 3


def test_findings_sorted_most_severe_first_and_status() -> None:
    state: dict[str, dict[str, Any]] = {}
    views = [view(PRESSURE, name="a"), view({}, health="unreachable", name="b")]
    found = evaluate(views, state, now=1000.0, playbooks=[ENGINE_DOWN, KV_PRESSURE])
    assert [f.playbook for f in found] == ["engine_down"]  # kv_pressure still inside its 5 min
    assert worst(found) == "critical"
    assert worst([]) == "ok"


def test_rendering_is_json_safe_and_readable() -> None:
    f = Finding("kv_pressure", "hot", "warning", 0.8, "KV cache 90% used",
                (Evidence("kv_cache_usage", float("nan"), 0.75, 30.0),),
                (Action("relaunch", "hot", {"max_num_seqs": 12}, {"max_num_seqs": 16}, "medium"),),
                "docs/runbooks.md#kv-pressure", onset=1000.0, title="KV-cache pressure")
    d = f.to_dict()
    assert d["evidence"][0]["value"] is None
    assert d["remedies"][0]["action"] == "relaunch" and d["remedies"][0]["id"].startswith("act-")
    assert "remedy 1: relaunch on hot (max_num_seqs=12)" in f.text()


@pytest.mark.parametrize(("agreeing", "considered", "expected"), [(1, 1, 0.95), (1, 3, 0.65), (0, 0, 0.5)])
def test_confidence_grows_with_agreeing_signals(agreeing: int, considered: int, expected: float) -> None:
    assert confidence_from(agreeing, considered) == expected


def test_engine_down_warns_when_only_metrics_are_unreadable() -> None:
    v = view({"scrape_ok": 0.0})
    v.signals.reasons["scrape_ok"] = "/metrics timed out after 5s"  # type: ignore[index]
    cond = ENGINE_DOWN.check(v)
    assert cond is not None and cond.severity == "warning" and "timed out" in cond.summary
    assert ENGINE_DOWN.check(view({"scrape_ok": 1.0})) is None


def test_a_window_without_data_neither_holds_nor_clears_an_incident() -> None:
    state: dict[str, dict[str, Any]] = {}
    evaluate([view(PRESSURE)], state, now=1000.0, playbooks=[KV_PRESSURE])
    evaluate([view({"kv_cache_usage": None, "preemptions_per_s": None, "waiting": None})], state, now=1060.0,
             playbooks=[KV_PRESSURE])
    assert state["kv_pressure|hot"]["onset"] == 1000.0
    found = evaluate([view(PRESSURE)], state, now=1300.0, playbooks=[KV_PRESSURE])
    assert [f.playbook for f in found] == ["kv_pressure"]
