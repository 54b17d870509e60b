"""People decide and undo: approve, reject or roll back one action record. `doctor approve/reject/rollback` (on
the state directory) and the daemon's `POST /v1/actions/{id}/...` both call `decide`, so both go through the
same queue, audit log and guardrails as an automatic action."""

from __future__ import annotations

from dataclasses import dataclass

from doctor.remedy.executor import Remediator, planned_of
from doctor.remedy.model import ActionRecord
from doctor.remedy.queue import AmbiguousAction, QueueError, UnknownAction

COMMANDS = ("approve", "reject", "rollback")
OK, REFUSED, UNKNOWN = "ok", "refused", "unknown"


@dataclass(frozen=True)
class Decided:
    """How it went: `result` ok | refused | unknown (no such id, or ambiguous), a sentence, the record."""

    result: str
    text: str
    record: ActionRecord | None = None


async def decide(rem: Remediator, command: str, record_id: str, who: str, reason: str = "") -> Decided:
    """Approve (and apply now, within the guardrails), reject, or roll back the record `record_id`."""
    if command not in COMMANDS:
        raise ValueError(f"unknown decision {command!r}; expected one of {', '.join(COMMANDS)}")
    try:
        if command == "reject":
            rec = rem.store.reject(record_id, who, reason)
            rem.audit.write("rejected", rec, who=who)
            return Decided(OK, f"rejected {rec.id}", rec)
        if command == "approve":
            rec = rem.store.approve(record_id, who)
            rem.audit.write("approved", rec, who=who)
            return await _apply_approved(rem, rec.id, who)
        rec = rem.store.get(record_id)
    except (UnknownAction, AmbiguousAction) as exc:
        return Decided(UNKNOWN, str(exc))
    except QueueError as exc:  # e.g. approving an expired or already decided action
        return Decided(REFUSED, str(exc))
    if rec.status not in ("applied", "verified") or not rec.inverse:
        return Decided(REFUSED, f"{rec.id} is {rec.status}; only applied actions with an inverse can be undone", rec)
    await rem.rollback(rec, f"rolled back by {who}")
    return Decided(OK if rec.status == "rolled_back" else REFUSED, f"{rec.id}: {rec.status} ({rec.reason})", rec)


async def _apply_approved(rem: Remediator, record_id: str, who: str) -> Decided:
    """Apply an approved action through the same guardrails as an automatic one."""
    rec = rem.store.claim(record_id, who)
    if rec is None:
        return Decided(REFUSED, f"{record_id}: already taken by another run")
    planned = planned_of(rec)
    decision = rem.guard.check(planned, engines_total=max(1, len(rem.ctx.engines)))
    if not decision.allowed:
        rem._end(rec, "refused", decision.reason or "refused by the guardrails", journal=False)
    else:
        await rem.apply(planned, rec)
    return Decided(OK if rec.status == "applied" else REFUSED, f"{rec.id}: {rec.status} ({rec.reason})", rec)
