"""Chaos: the clock jumps a day back, then forward. The doctor takes its clock as I/O (the cycle, guardrails,
approval queue), so each test hands the real objects a clock that jumps. What must stay sane: a cooldown or the
hourly budget lasts at most its own length after a jump back (not the jump's length more) and is not handed out
again by it; a `for` restarts rather than waiting out the jump (back) or firing from it (forward); a pending approval
expires an hour after it was asked, whichever way the clock went."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from doctor.config import config_from_dict
from doctor.cycle import CycleResult, run_cycle
from doctor.engines import EngineRef
from doctor.plan import Plan
from doctor.remedy.guardrails import Guardrails
from doctor.remedy.model import ActionRecord
from doctor.remedy.planner import Planned, plan
from doctor.remedy.queue import ActionStore
from playbooks.model import Action, Finding
from tests.chaos.conftest import Record
from tests.serve.stack import engines, load
from trials.live import SpawnedEngine

pytestmark = pytest.mark.timeout(240)
DAY = 86400.0
T0 = 1_790_000_000.0


class Clock:
    """Wall time plus an offset that a test moves (the jumps)."""

    def __init__(self, start: float | None = None) -> None:
        self.offset = 0.0 if start is None else start - time.time()

    def __call__(self) -> float:
        return time.time() + self.offset


def _relaunch(engine: str = "hot") -> Planned:
    action = Action("relaunch", engine, {"max_num_seqs": 64})
    (p,) = plan([Finding("kv_pressure", engine, "warning", 0.8, "x", (), (action,), "", onset=1.0)])
    return p


def _guard(tmp_path: Path, clock: Clock, **doctor: float) -> Guardrails:
    cfg = config_from_dict({"doctor": {"mode": "auto", "cooldown_s": 900, "hourly_action_budget": 2, **doctor},
                            "engines": [{"name": n, "url": f"http://127.0.0.1:{8000 + i}", "gpus": [i]}
                                        for i, n in enumerate(("hot", "cold", "spare"))]})
    return Guardrails(tmp_path / "state", cfg, clock)


def test_cooldown_and_budget_survive_a_clock_jumping_back(tmp_path: Path, outcome: Record) -> None:
    clock = Clock(T0)
    g = _guard(tmp_path, clock)
    g.record_applied(_relaunch("hot"), engines_total=3)
    g.record_applied(_relaunch("cold"), engines_total=3)
    assert g.budget_left() == 0

    clock.offset -= DAY  # a day back
    d = g.check(_relaunch("hot"), engines_total=3)
    assert d.guard == "cooldown", d  # still cooling down: the jump hands out nothing
    wait = float(re.search(r"allowed again in (-?\d+) s", d.reason).group(1))  # type: ignore[union-attr]
    assert 0 < wait <= 900, d.reason  # at most the cooldown itself, not a day and a quarter of an hour
    assert "-" not in d.reason.split("applied ", 1)[1].split(" s ago")[0], d.reason  # never "applied -86400 s ago"
    assert 0 < g.cooldown_left("relaunch", "hot") <= 900
    assert g.budget_left() == 0  # the hour's actions still count
    assert g.check(_relaunch("spare"), engines_total=3).guard == "budget"

    clock.offset += 901  # the cooldown's length after the jump
    assert g.cooldown_left("relaunch", "hot") == 0
    clock.offset += 3600 - 901  # the budget's hour after the jump
    assert g.budget_left() == 2 and g.check(_relaunch("hot"), engines_total=3).allowed

    g.record_applied(_relaunch("hot"), engines_total=3)
    clock.offset += DAY  # a day forward: that much time passed, as far as anyone can tell
    assert g.cooldown_left("relaunch", "hot") == 0 and g.budget_left() == 2
    outcome("recovered", "a day back: the cooldown still held, for at most its 900 s, the budget stayed spent for "
                         "at most its hour; a day forward: both free, as after a day", lost=0)


def test_approval_expiry_after_a_clock_jump(tmp_path: Path, outcome: Record) -> None:
    clock = Clock(T0)
    store = ActionStore(tmp_path / "state", clock=clock)
    asked = store.enqueue(ActionRecord(id="run-clock01", playbook="kv_pressure", engine="hot", finding_id="fnd-clock",
                                       action={"action": "relaunch", "target": "hot", "params": {}},
                                       created_at=clock()))
    clock.offset -= DAY
    assert store.get(asked.id).status == "pending"  # not expired by going back (a read marks what expired)
    clock.offset += 3599
    assert store.get(asked.id).status == "pending"
    clock.offset += 2
    assert store.get(asked.id).status == "expired"  # an hour after the jump, not a day and an hour

    again = store.enqueue(ActionRecord(id="run-clock02", playbook="kv_pressure", engine="hot", finding_id="fnd-clock",
                                       action={"action": "relaunch", "target": "hot", "params": {}},
                                       created_at=clock()))
    clock.offset += DAY  # forward: the hour has passed as far as anyone can tell
    assert store.get(again.id).status == "expired"
    outcome("recovered", "a pending approval expired an hour after the clock went a day back (not a day later), "
                         "and at once after it went a day forward", lost=0)


@pytest.fixture(scope="module")
def storm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedEngine]:
    with engines(["hot"], tmp_path_factory.mktemp("clock")) as eng:
        traffic = load(eng["hot"].url)  # half 9000-token documents: long_prompt_share (its `for`: 60 s)
        try:
            yield eng["hot"]
        finally:
            traffic.stop()


def test_for_duration_after_a_clock_jump(storm: SpawnedEngine, tmp_path: Path, outcome: Record) -> None:
    clock = Clock(T0)
    cfg = Plan(engines=(EngineRef("hot", "hot", storm.url),), state_dir=tmp_path / "state", sample_s=1.0,
               window_s=20.0, min_requests=1)

    def cycle() -> CycleResult:
        return asyncio.run(run_cycle(cfg, clock=clock))

    def lps(result: CycleResult) -> tuple[list[Finding], list[Finding]]:
        return ([f for f in result.findings if f.playbook == "long_prompt_share"],
                [f for f in result.pending if f.playbook == "long_prompt_share"])

    first = cycle()
    for _ in range(10):  # until the storm's long prompts are in a window (bounded)
        if lps(first)[1]:
            break
        first = cycle()
    fired, waiting = lps(first)
    assert not fired and waiting, first.report["engines"][0]["signals"]
    onset = waiting[0].onset

    clock.offset -= DAY
    fired, waiting = lps(cycle())
    assert not fired and waiting
    assert waiting[0].fires_in_s <= 60.0, waiting[0]  # restarted, not waiting out the day
    assert waiting[0].onset < onset  # re-stamped by the clock as it is now

    for _ in range(2):  # the `for` held for 62 s, seen every 31 s (a gap over 60 s would restart it)
        clock.offset += 31
        fired, _ = lps(cycle())
    assert fired and fired[0].held_s >= 60.0  # fires once its `for` has held on the clock as it is now

    clock.offset += DAY
    fired, waiting = lps(cycle())
    assert not fired and waiting and waiting[0].held_s < 60.0  # a day's jump is not a day of holding
    outcome("recovered", "a day back: the pending `for` restarted (fired 60 s later, not a day later); a day "
                         "forward: a new incident, pending, not fired from the jump", lost=0)
