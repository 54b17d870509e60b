"""Drift test (#13): the efficacy harness keeps the guardrail settings the doctor ships (DoctorConfig()), not
constants of its own. The harness's cooldown was 600 s while the shipped default is 900 s: in the fragmentation
scenario it defragmented the same engine again 600 s after the first time."""

from __future__ import annotations

from dataclasses import replace

from doctor.config import DoctorConfig
from sim.scenarios import get_scenario
from trials import efficacy as eff

DURATION_S = 1200.0  # as bench/remediation_efficacy.py runs it: long enough for a second defragment


def _taken(actions: list[dict[str, object]]) -> list[dict[str, object]]:
    return [a for a in actions if a["status"] != "refused" and a["trigger"] == "trial"]


def test_a_run_keeps_the_shipped_cooldown() -> None:
    run = eff.run(get_scenario("fragmentation"), seed=0, mode="auto", duration_s=DURATION_S)
    cooldown = DoctorConfig().cooldown_s
    taken = _taken(run.actions)
    assert taken, run.actions
    last: dict[tuple[object, object], float] = {}
    for a in taken:
        key, t = (a["action"], a["target"]), float(a["t_s"])  # type: ignore[arg-type]
        assert t - last.get(key, -cooldown) >= cooldown, (key, t, last.get(key), cooldown)
        last[key] = t


def test_the_config_given_is_the_one_the_run_keeps() -> None:
    config = replace(DoctorConfig(), cooldown_s=600.0, hourly_action_budget=1)
    run = eff.run(get_scenario("fragmentation"), seed=0, mode="auto", duration_s=DURATION_S, config=config)
    defrag = [a for a in run.actions if a["action"] == "defragment" and a["trigger"] == "trial"]
    assert len(_taken(defrag)) == 1, defrag
    # 600 s after the first, out of the cooldown this config sets, it is tried again: the budget of 1 refuses it.
    again = [a for a in defrag if a["status"] == "refused"]
    assert again and "hourly action budget spent" in str(again[0]["reason"])
    assert float(again[0]["t_s"]) - float(defrag[0]["t_s"]) >= 600.0  # type: ignore[arg-type]
