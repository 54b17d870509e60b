"""The action records store and the approval queue, in `actions.json` under the state dir.

Every ActionRecord the doctor creates is kept here (current state), so `doctor actions` can list the
pending and recent ones and `doctor approve/reject/rollback ID` can find them. In approve mode a record
is queued as `pending`; a person approves it (it goes back to `planned`, marked approved, for the next
run to apply: `approved()` / `claim()`) or rejects it (`refused`, with who and why). A pending record
older than `pending_ttl_s` (default one hour) becomes `expired`: an approval must not apply a fix
planned for a state of the fleet that has since changed.

IDs: the exact ActionRecord.id, or a prefix of it (the `run-` part may be left out); a prefix that
matches more than one record is refused with the candidates. Every change happens under
`actions.lock`, and the file is replaced atomically. The store is bounded: all non-terminal records and
the latest `keep` terminal ones.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from doctor.remedy.model import TERMINAL, ActionRecord
from doctor.state import StateDir

STORE_FILE = "actions.json"
STORE_LOCK = "actions"
PENDING_TTL_S = 3600.0


class QueueError(Exception):
    """A queue request that cannot be done (unknown or ambiguous id, wrong state); the message says why."""


class UnknownAction(QueueError):
    pass


class AmbiguousAction(QueueError):
    pass


class ActionStore:
    """Records by id, persisted; see the module docstring."""

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time,
                 pending_ttl_s: float = PENDING_TTL_S, keep: int = 500) -> None:
        self.state = StateDir(Path(state_dir))
        self.clock = clock
        self.pending_ttl_s = pending_ttl_s
        self.keep = keep

    # -- writing

    def put(self, record: ActionRecord, **meta: Any) -> ActionRecord:
        """Insert or replace a record (updated_at set now); `meta` (approved_by, ...) is kept beside it."""
        with self._doc() as doc:
            record.updated_at = self.clock()
            old = doc.get(record.id, {})
            doc[record.id] = {**{k: v for k, v in old.items() if k not in record.to_dict()},
                              **record.to_dict(), **meta}
        return record

    def enqueue(self, record: ActionRecord) -> ActionRecord:
        """Queue for approval: status pending, since now."""
        record.status = "pending"
        record.reason = record.reason or "waiting for approval"
        return self.put(record, queued_at=self.clock())

    def update(self, record_id: str, **changes: Any) -> ActionRecord:
        """Change fields of a stored record (e.g. status="applied", after={...})."""
        known = set(ActionRecord.__dataclass_fields__) - {"id"}
        bad = sorted(set(changes) - known)
        if bad:
            raise QueueError(f"unknown ActionRecord field(s): {', '.join(bad)}")
        with self._doc() as doc:
            rid = self._resolve(doc, record_id)
            doc[rid].update(changes, updated_at=self.clock())
            return ActionRecord.from_dict(doc[rid])

    def approve(self, record_id: str, who: str) -> ActionRecord:
        """A person approves a pending action: it becomes `planned` (approved) for the next run to apply."""
        with self._doc() as doc:
            rid = self._resolve(doc, record_id)
            self._must_be_pending(doc[rid], "approve")
            now = self.clock()
            doc[rid].update(status="planned", reason=f"approved by {who}", approved_by=who, approved_at=now,
                            updated_at=now, steps=[*doc[rid].get("steps", []), f"approved by {who}"])
            return ActionRecord.from_dict(doc[rid])

    def reject(self, record_id: str, who: str, reason: str = "") -> ActionRecord:
        """A person rejects a pending action: it becomes `refused`, saying who and why."""
        with self._doc() as doc:
            rid = self._resolve(doc, record_id)
            self._must_be_pending(doc[rid], "reject")
            now = self.clock()
            why = f"rejected by {who}" + (f": {reason}" if reason else "")
            doc[rid].update(status="refused", reason=why, rejected_by=who, updated_at=now,
                            steps=[*doc[rid].get("steps", []), why])
            return ActionRecord.from_dict(doc[rid])

    def claim(self, record_id: str, by: str) -> ActionRecord | None:
        """Take an approved action to apply it; None when it is not approved-and-unclaimed (another run has it)."""
        with self._doc() as doc:
            rid = self._resolve(doc, record_id)
            entry = doc[rid]
            if entry.get("status") != "planned" or not entry.get("approved_by") or entry.get("claimed_by"):
                return None
            entry.update(claimed_by=by, updated_at=self.clock())
            return ActionRecord.from_dict(entry)

    def expire(self) -> list[ActionRecord]:
        """Mark pending actions older than pending_ttl_s as expired; returns them."""
        with self._doc() as doc:
            return [ActionRecord.from_dict(doc[rid]) for rid in self._expire(doc)]

    # -- reading

    def get(self, record_id: str) -> ActionRecord:
        """By id or unambiguous prefix; UnknownAction / AmbiguousAction otherwise."""
        with self._doc() as doc:
            return ActionRecord.from_dict(doc[self._resolve(doc, record_id)])

    def meta(self, record_id: str) -> dict[str, Any]:
        """What is kept beside the record (approved_by, approved_at, rejected_by, claimed_by, queued_at)."""
        with self._doc() as doc:
            entry = doc[self._resolve(doc, record_id)]
            return {k: v for k, v in entry.items() if k not in ActionRecord.__dataclass_fields__}

    def pending(self) -> list[ActionRecord]:
        """Pending actions, oldest first (expired ones are marked expired first)."""
        with self._doc() as doc:
            return [ActionRecord.from_dict(e) for e in _by_time(doc.values()) if e.get("status") == "pending"]

    def pending_like(self, record: ActionRecord) -> ActionRecord | None:
        """A pending record of the same kind on the same target for the same finding (approve mode asks once)."""
        with self._doc() as doc:
            for e in _by_time(doc.values()):
                action = e.get("action") or {}
                if e.get("status") == "pending" and e.get("finding_id") == record.finding_id and \
                        action.get("action") == record.kind and action.get("target") == record.target:
                    return ActionRecord.from_dict(e)
        return None

    def approved(self) -> list[ActionRecord]:
        """Approved actions not yet claimed, oldest first."""
        with self._doc() as doc:
            return [ActionRecord.from_dict(e) for e in _by_time(doc.values())
                    if e.get("status") == "planned" and e.get("approved_by") and not e.get("claimed_by")]

    def recent(self, n: int = 20) -> list[ActionRecord]:
        """The n most recently updated records, newest first."""
        with self._doc() as doc:
            return [ActionRecord.from_dict(e) for e in reversed(_by_time(doc.values(), "updated_at"))][:n]

    # -- internals

    @contextlib.contextmanager
    def _doc(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The document under the lock, with expired records marked; saved (trimmed) when the body succeeds."""
        with self.state.lock(STORE_LOCK, wait=True):
            raw = self.state.load_json(STORE_FILE, {})
            records = raw.get("records") if isinstance(raw, dict) else None
            doc = {str(k): v for k, v in (records or {}).items() if isinstance(v, dict)}
            before = json.dumps(doc, sort_keys=True, default=str)
            self._expire(doc)
            yield doc
            self._trim(doc)
            if json.dumps(doc, sort_keys=True, default=str) != before:
                self.state.save_json(STORE_FILE, {"records": doc})

    def _expire(self, doc: dict[str, dict[str, Any]]) -> list[str]:
        now, out = self.clock(), []
        for rid, entry in doc.items():
            since = float(entry.get("queued_at") or entry.get("created_at") or now)
            if entry.get("status") == "pending" and since > now:  # the clock went back: the hour counts from now
                entry["queued_at"] = since = now
            if entry.get("status") == "pending" and now - since >= self.pending_ttl_s:
                entry.update(status="expired", updated_at=now,
                             reason=f"not approved within {self.pending_ttl_s:.0f} s")
                out.append(rid)
        return out

    def _must_be_pending(self, entry: dict[str, Any], verb: str) -> None:
        status = entry.get("status")
        if status != "pending":
            extra = f" ({entry.get('reason')})" if entry.get("reason") else ""
            raise QueueError(f"cannot {verb} {entry.get('id')}: it is {status}{extra}, not pending")

    def _resolve(self, doc: dict[str, dict[str, Any]], text: str) -> str:
        key = text.strip()
        if not key:
            raise UnknownAction("an action id is needed (see `doctor actions`)")
        if key in doc:
            return key
        matches = [rid for rid in doc if rid.startswith(key)]
        if not matches and not key.startswith("run-"):
            matches = [rid for rid in doc if rid.startswith("run-" + key)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise UnknownAction(f"no action with id {key!r}" + (f" (recent: {', '.join(list(doc)[-5:])})"
                                                                 if doc else " (no actions recorded yet)"))
        shown = ", ".join(sorted(matches)[:5]) + (" ..." if len(matches) > 5 else "")
        raise AmbiguousAction(f"{key!r} matches {len(matches)} actions ({shown}); type more of the id")

    def _trim(self, doc: dict[str, dict[str, Any]]) -> None:
        done = [e for e in _by_time(doc.values(), "updated_at") if e.get("status") in TERMINAL]
        for entry in done[:max(0, len(done) - self.keep)]:
            doc.pop(str(entry.get("id")), None)


def _by_time(entries: Iterable[dict[str, Any]], key: str = "created_at") -> list[dict[str, Any]]:
    return sorted(entries, key=lambda e: float(e.get(key) or 0.0))
