"""The approval queue and records store: pending, approve, reject, expiry, ids by prefix, concurrency."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from doctor.remedy.model import ActionRecord
from doctor.remedy.queue import ActionStore, AmbiguousAction, QueueError, UnknownAction

CTX = multiprocessing.get_context("fork")


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def record(rid: str | None = None, engine: str = "hot", **kw: Any) -> ActionRecord:
    rec = ActionRecord(action={"id": "act-1", "action": "relaunch", "target": engine, "params": {"max_num_seqs": 64},
                               "inverse": None, "risk": "medium", "description": ""},
                       engine=engine, playbook="kv_pressure", finding_id="fnd-1", **kw)
    if rid:
        rec.id = rid
    return rec


def test_enqueue_pending_approve(tmp_path: Path) -> None:
    clock = Clock()
    store = ActionStore(tmp_path, clock=clock)
    rec = store.enqueue(record())
    assert [r.id for r in store.pending()] == [rec.id] and store.get(rec.id).status == "pending"
    clock.t += 60
    approved = store.approve(rec.id, "alice")
    assert approved.status == "planned" and approved.reason == "approved by alice"
    assert approved.steps[-1] == "approved by alice"
    assert store.pending() == [] and [r.id for r in store.approved()] == [rec.id]
    assert store.meta(rec.id)["approved_by"] == "alice"
    with pytest.raises(QueueError, match=r"is planned .* not pending"):
        store.approve(rec.id, "bob")


def test_reject_says_who_and_why(tmp_path: Path) -> None:
    store = ActionStore(tmp_path)
    rec = store.enqueue(record())
    got = store.reject(rec.id, "bob", "peak traffic, do it tonight")
    assert got.status == "refused" and got.reason == "rejected by bob: peak traffic, do it tonight"
    assert store.approved() == [] and store.pending() == []


def test_pending_expires_after_an_hour(tmp_path: Path) -> None:
    clock = Clock()
    store = ActionStore(tmp_path, clock=clock)
    old = store.enqueue(record())
    clock.t += 1800
    young = store.enqueue(record())
    clock.t += 1801
    assert [r.id for r in store.pending()] == [young.id]
    got = store.get(old.id)
    assert got.status == "expired" and "not approved within 3600 s" in got.reason
    with pytest.raises(QueueError, match="expired"):
        store.approve(old.id, "alice")
    clock.t += 3600
    assert [r.id for r in store.expire()] == []  # already marked when read
    assert store.get(young.id).status == "expired"


def test_ids_by_prefix(tmp_path: Path) -> None:
    store = ActionStore(tmp_path)
    store.put(record("run-abc111"))
    store.put(record("run-abc222"))
    store.put(record("run-def333"))
    assert store.get("run-def").id == "run-def333"
    assert store.get("def3").id == "run-def333"  # "run-" may be left out
    assert store.get("run-abc111").id == "run-abc111"
    with pytest.raises(AmbiguousAction, match=r"matches 2 actions .*run-abc111, run-abc222"):
        store.get("abc")
    with pytest.raises(UnknownAction, match="no action with id 'zzz'"):
        store.get("zzz")
    with pytest.raises(UnknownAction, match="id is needed"):
        store.get("  ")


def test_update_and_recent_and_persistence(tmp_path: Path) -> None:
    clock = Clock()
    store = ActionStore(tmp_path, clock=clock)
    a = store.put(record())
    clock.t += 1
    b = store.put(record())
    clock.t += 1
    store.update(a.id, status="applied", after={"p99_ttft_s": 0.5})
    assert [r.id for r in ActionStore(tmp_path).recent(5)] == [a.id, b.id]
    got = ActionStore(tmp_path).get(a.id)
    assert got.status == "applied" and got.after == {"p99_ttft_s": 0.5}
    with pytest.raises(QueueError, match="unknown ActionRecord field"):
        store.update(a.id, colour="red")


def test_store_is_bounded(tmp_path: Path) -> None:
    clock = Clock()
    store = ActionStore(tmp_path, clock=clock, keep=5)
    live = store.enqueue(record())
    for _ in range(12):
        clock.t += 1
        store.put(record(status="verified"))
    recent = store.recent(100)
    assert len(recent) == 6 and live.id in {r.id for r in recent}


def test_claim_once(tmp_path: Path) -> None:
    store = ActionStore(tmp_path)
    rec = store.enqueue(record())
    assert store.claim(rec.id, "cron") is None  # not approved yet
    store.approve(rec.id, "alice")
    assert store.claim(rec.id, "cron") is not None
    assert store.claim(rec.id, "serve") is None
    assert store.approved() == []


def _claimer(state: str, rid: str, barrier: Any) -> None:
    store = ActionStore(Path(state))
    barrier.wait(timeout=30)
    os._exit(0 if store.claim(rid, f"pid-{os.getpid()}") is not None else 1)


def test_concurrent_claims_one_winner(tmp_path: Path) -> None:
    store = ActionStore(tmp_path)
    rec = store.enqueue(record())
    store.approve(rec.id, "alice")
    barrier = CTX.Barrier(6)
    procs = [CTX.Process(target=_claimer, args=(str(tmp_path), rec.id, barrier)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    codes = [p.exitcode for p in procs]
    assert codes.count(0) == 1 and codes.count(1) == 5
