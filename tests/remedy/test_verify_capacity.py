"""A scale-out that did not bring the queue down is kept and escalated, never rolled back: removing a replica
during an overload would deepen it. Other actions still roll back (tests/remedy/test_fix_loop.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from collectors.types import Signals
from doctor.config import config_from_dict
from doctor.remedy.planner import plan_all, verify_spec
from doctor.remedy.setup import remediator
from playbooks.model import Action, Finding


def test_planner_marks_capacity_additions_as_kept_on_failure() -> None:
    spec = verify_spec("queue_pressure", "scale_out")
    assert spec is not None and spec.keep_on_fail
    relaunch = verify_spec("kv_pressure", "relaunch")
    assert relaunch is not None and not relaunch.keep_on_fail


def test_a_scale_out_that_did_not_help_is_kept_and_escalated(tmp_path: Path) -> None:
    config = config_from_dict({"doctor": {"mode": "auto"},
                               "engines": [{"name": "hot", "url": "http://127.0.0.1:9", "gpus": [0]}]})
    rem = remediator(config, tmp_path)
    now = [1_900_000_000.0]
    rem.clock = rem.guard.clock = lambda: now[0]
    finding = Finding("queue_pressure", "hot", "warning", 0.9, "30 requests waiting", (),
                      (Action("scale_out", "hot", {"add_replicas": 1}, inverse={"add_replicas": -1}),), "", now[0])
    [planned], _ = plan_all([finding])
    rec = planned.record()
    assert rec.verify is not None and rec.verify["keep_on_fail"] is True
    rec.status, rec.updated_at = "applied", now[0]
    rec.before = {"p99_queue_s": 10.0}
    rec.inverse = {"action": "scale_out", "target": "hot", "params": {"remove_replica": "hot-2"}}
    rem.journal.begin(rec)

    async def reread() -> dict[str, Signals]:
        return {"hot": Signals("hot", 5.0, "ok", 200, {"p99_queue_s": 12.0})}  # worse: the load kept rising

    now[0] += 300  # inside its 600 s window: not judged yet
    asyncio.run(rem.verify([rec], reread, wait_s=0))
    assert rec.status == "applied"
    now[0] += 400
    asyncio.run(rem.verify([rec], reread, wait_s=0))
    assert rec.status == "failed" and "kept, not rolled back" in rec.reason, rec
    events = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events][-2:] == ["failed", "escalated"]
    assert rem.journal.unfinished() == []
