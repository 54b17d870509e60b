"""The write-ahead intent journal: begin/step/finish, what a restart must reconcile, torn lines, compaction."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from doctor.remedy.journal import Journal, JournalError
from doctor.remedy.model import ActionRecord

CTX = multiprocessing.get_context("fork")


def record(engine: str = "hot", kind: str = "relaunch", **kw: Any) -> ActionRecord:
    return ActionRecord(action={"id": "act-1", "action": kind, "target": engine, "params": {"max_num_seqs": 64},
                                "inverse": {"max_num_seqs": 128}, "risk": "medium", "description": ""},
                        engine=engine, playbook="kv_pressure", finding_id="fnd-1", **kw)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_begin_step_finish_and_unfinished(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    a, b = record("hot"), record("cold")
    j.begin(a)
    j.begin(b)
    j.step(a.id, "drained hot at the router")
    j.step(a.id, "stopped hot", inverse={"max_num_seqs": 128, "engine": "hot"}, status="applied")
    assert [r.id for r in j.unfinished()] == [a.id, b.id]
    got = j.unfinished()[0]
    assert got.steps == ["drained hot at the router", "stopped hot"]
    assert got.inverse == {"max_num_seqs": 128, "engine": "hot"} and got.status == "applied"
    j.finish(b.id, "verified")
    assert [r.id for r in j.unfinished()] == [a.id]
    assert j.finished_ids() == {b.id}
    finished = j.get(b.id)
    assert finished is not None and finished.status == "verified"
    assert [e["op"] for e in lines(j.path)] == ["begin", "begin", "step", "step", "finish"]
    assert j.problems == []


def test_state_survives_a_new_journal_object(tmp_path: Path) -> None:
    a = record()
    Journal(tmp_path).begin(a)
    Journal(tmp_path).step(a.id, "started")
    (rec,) = Journal(tmp_path).unfinished()
    assert rec.id == a.id and rec.steps == ["started"] and rec.to_dict()["action"] == a.action


def test_bad_calls_are_clear_errors(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    a = record()
    with pytest.raises(JournalError, match="no record run-nope was begun"):
        j.step("run-nope", "x")
    with pytest.raises(JournalError, match="no record"):
        j.finish("run-nope", "verified")
    j.begin(a)
    with pytest.raises(JournalError, match="already in the journal"):
        j.begin(a)
    with pytest.raises(JournalError, match="unknown status"):
        j.finish(a.id, "done")  # type: ignore[arg-type]
    with pytest.raises(JournalError, match="unknown ActionRecord field"):
        j.step(a.id, "x", colour="red")
    j.finish(a.id, "failed", "launcher exited 1")
    j.finish(a.id, "verified")  # finishing twice: no-op
    rec = j.get(a.id)
    assert rec is not None and rec.status == "failed" and rec.reason == "launcher exited 1"


def test_every_line_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    j = Journal(tmp_path)
    a = record()
    j.begin(a)
    n = len(calls)
    j.step(a.id, "x")
    j.finish(a.id, "verified")
    assert n >= 1 and len(calls) >= n + 2


def test_torn_last_line_is_tolerated_and_reported(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    a, b = record("hot"), record("cold")
    j.begin(a)
    j.step(a.id, "drained")
    j.begin(b)
    raw = j.path.read_bytes()
    j.path.write_bytes(raw[:-40])  # crash in the middle of writing b's begin line
    assert [r.id for r in j.unfinished()] == [a.id]  # b never started: its intent was not durable
    assert len(j.problems) == 1 and "torn last line" in j.problems[0]
    # the next write starts on a fresh line; the fragment stays reported, nothing else is lost
    c = record("cold")
    j.begin(c)
    j.step(a.id, "stopped")
    assert [r.id for r in j.unfinished()] == [a.id, c.id]
    assert j.unfinished()[0].steps == ["drained", "stopped"]
    assert len(j.problems) == 1 and "unreadable line" in j.problems[0]


def test_torn_finish_leaves_the_record_to_reconcile(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    a = record()
    j.begin(a)
    j.step(a.id, "relaunched")
    j.finish(a.id, "verified")
    raw = j.path.read_bytes()
    j.path.write_bytes(raw[: raw.rindex(b"\n", 0, len(raw) - 1) + 10])  # cut inside the finish line
    (rec,) = j.unfinished()
    assert rec.id == a.id and rec.steps == ["relaunched"]
    j.finish(a.id, "verified")  # reconciled
    assert j.unfinished() == []


def test_garbage_and_unknown_ids_are_reported_not_fatal(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    a = record()
    j.begin(a)
    with open(j.path, "a") as f:
        f.write("not json\n")
        f.write(json.dumps({"op": "step", "id": "run-ghost", "at": 1.0, "what": "x"}) + "\n")
        f.write(json.dumps([1, 2]) + "\n")
    assert [r.id for r in j.unfinished()] == [a.id]
    assert len(j.problems) == 3 and any("never begun" in p for p in j.problems)


def test_compaction_keeps_the_unfinished_and_bounds_the_file(tmp_path: Path) -> None:
    j = Journal(tmp_path, max_bytes=8_000, keep_finished=3)
    keep = record("hot")
    j.begin(keep)
    j.step(keep.id, "drained", inverse={"engine": "hot", "state": "active"})
    ids = []
    for _ in range(60):
        r = record("cold")
        j.begin(r)
        j.step(r.id, "did it")
        j.finish(r.id, "verified")
        ids.append(r.id)
    assert j.path.stat().st_size <= 8_000 + 2_000
    (rec,) = j.unfinished()
    assert rec.id == keep.id and rec.steps == ["drained"] and rec.inverse == {"engine": "hot", "state": "active"}
    finished = j.finished_ids()
    assert ids[-1] in finished and len(finished) <= 3 + 60 // 2
    assert j.compact() >= 0
    assert j.finished_ids() <= set(ids[-3:])
    j.step(keep.id, "resumed")  # still appendable after compaction
    j.finish(keep.id, "rolled_back")
    assert j.unfinished() == [] and j.problems == []


def _writer(state: str, n: int) -> None:
    j = Journal(Path(state))
    for _ in range(n):
        r = record("hot")
        j.begin(r)
        j.step(r.id, "x")
        j.finish(r.id, "verified")
    os._exit(0)


def test_concurrent_writers_do_not_interleave(tmp_path: Path) -> None:
    procs = [CTX.Process(target=_writer, args=(str(tmp_path), 15)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    j = Journal(tmp_path)
    state = j.read()
    assert len(state.records) == 60 and len(state.finished) == 60 and state.problems == []
