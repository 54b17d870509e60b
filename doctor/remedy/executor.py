"""Apply planned actions within the guardrails, verify them, roll back, escalate; reconcile after a crash.

Every step goes to the write-ahead journal before it is taken and to the audit log after, so a doctor
killed between steps finds its unfinished work on the next start (`reconcile`): an action begun but
not known to be applied is applied again (actions are idempotent: they set values), an applied one is
verified or rolled back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from collectors.types import Signals
from doctor.remedy.actuators import Registry
from doctor.remedy.audit import AuditLog
from doctor.remedy.escalate import Escalation, EscalationError, escalate
from doctor.remedy.guardrails import Guardrails, TargetBusy
from doctor.remedy.journal import Journal
from doctor.remedy.lift import already_in_force, judge, limit_tokens
from doctor.remedy.model import ActionRecord, ActuatorContext, ActuatorError, Refused, VerifySpec
from doctor.remedy.outbox import OUTBOX_FILE, Outbox
from doctor.remedy.planner import ESCALATING_KINDS, Planned, normalise, plan_all, verify_spec, within_gpu_budget
from doctor.remedy.queue import ActionStore
from playbooks.model import Action, Finding

Reread = Callable[[], Awaitable[Mapping[str, Signals]]]
CRASH_ENV = "SERVING_DOCTOR_CRASH_AT"  # test seam: "after-begin" | "after-apply" kills the doctor with SIGKILL


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _action(d: Mapping[str, Any]) -> Action:
    return Action(str(d["action"]), str(d["target"]), dict(d.get("params") or {}),
                  d.get("inverse"), d.get("risk", "low"))


def _spec(d: Mapping[str, Any] | None) -> VerifySpec | None:
    if not d:
        return None
    return VerifySpec(str(d["signal"]), d["direction"], d.get("target"), d.get("ratio"), float(d.get("within_s", 120)),
                      bool(d.get("keep_on_fail", False)))


def planned_of(rec: ActionRecord) -> Planned:
    """A record's action as a plan again (an approved record, a record a killed doctor left)."""
    action, target = normalise(_action(rec.action))
    finding = Finding(rec.playbook, rec.engine, "warning", 0.5, rec.reason or "recorded action", (), (action,),
                      "", onset=rec.created_at)
    return Planned(finding, action, target, verify_spec(rec.playbook, action.kind))


class Remediator:
    """One doctor's remediation loop over a state directory."""

    def __init__(self, *, config: Any, state_dir: Path, registry: Registry, ctx: ActuatorContext,
                 clock: Callable[[], float] = time.time, free_gpus: int | None = None,
                 spare_gpus: Callable[[], int | None] | None = None,
                 gate: Callable[[], str | None] | None = None) -> None:
        """`free_gpus` fixed, or `spare_gpus` asked before each check (the launcher's pool less what engines
        use); neither: unknown, and actions that need a free GPU are refused. `gate`: asked right before each
        change (apply, re-apply, rollback, lift); a reason means this doctor may not act now (a standby replica,
        doctor.leader), None that it may."""
        self.gate = gate
        self.config = config
        self.spare_gpus = spare_gpus
        self.registry = registry
        self.ctx = ctx
        self.clock = clock
        self.free_gpus = free_gpus
        self.journal = Journal(state_dir, clock=clock)
        self.guard = Guardrails(state_dir, config, clock=clock, journal=self.journal)
        self.audit = AuditLog(state_dir / "audit.jsonl", secrets=[ctx.router_token], clock=clock)
        self.store = ActionStore(state_dir, clock=clock)
        self.outbox = Outbox(state_dir, clock=clock)

    # ----- planning and applying ---------------------------------------------------------------

    async def fix(self, findings: Sequence[Finding], signals: Mapping[str, Signals], *, trigger: str = "cron",
                  yes: bool = False, engine_triggers: Mapping[str, str] | None = None) -> list[ActionRecord]:
        """Plan the first remedy of each finding and apply what the mode and guardrails allow; a record's trigger
        is its engine's in `engine_triggers` (the daemon: the alert waiting on it), else `trigger`."""
        # Info findings are chances to do better, not incidents: they are reported, never acted on.
        planned, _skipped = plan_all([f for f in findings if f.severity != "info"])
        records: list[ActionRecord] = []
        for p in planned:
            free = self.free_gpus if self.free_gpus is not None else self.spare_gpus() if self.spare_gpus else None
            p = within_gpu_budget(p, free, self._gpus_per_replica(p.engine))
            rec = p.record(trigger=(engine_triggers or {}).get(p.engine, trigger), now=self.clock())
            rec.before = _values(signals.get(p.engine))
            decision = self.guard.check(p, engines_total=max(1, len(self.ctx.engines)), free_gpus=free)
            if decision.mode == "observe":
                continue
            records.append(rec)
            if not decision.allowed:
                self._end(rec, "refused", decision.reason or "refused by the guardrails", journal=False)
                continue
            in_force = already_in_force(p.action, signals)
            if in_force:
                self._end(rec, "refused", in_force, journal=False)
                continue
            if p.is_escalation:
                if decision.mode == "dry-run":
                    self._set(rec, "planned", "dry-run: would page a person")
                else:
                    self._page(rec, p.finding)
                continue
            if decision.mode == "dry-run":
                self._set(rec, "planned", "dry-run: would apply")
                self.store.put(rec)
                self.audit.write("dry_run", rec)
                continue
            if decision.mode == "approve" and not yes:
                asked = self.store.pending_like(rec)
                if asked is not None:  # a person was asked already (an earlier cycle): asked once per finding
                    records[-1] = asked
                    continue
                rec.status = "pending"
                rec.reason = "waiting for `doctor approve` (approve mode)"
                self.store.enqueue(rec)
                self.audit.write("queued", rec)
                continue
            await self.apply(p, rec)
        return records

    def _gpus_per_replica(self, engine: str) -> int:
        """GPUs one replica of `engine` takes (its tensor-parallel degree, 1 when unknown)."""
        find = getattr(self.config, "engine", None)
        eng = find(engine) if callable(find) else None
        return max(1, int(getattr(eng, "tensor_parallel_size", None) or 1))

    async def apply(self, p: Planned, rec: ActionRecord) -> None:
        """Take the target's lock, journal the intent, apply, record; refusals and failures change nothing."""
        action = p.action
        if (held := self._held()) is not None:
            self._end(rec, "refused", held, journal=False)
            return
        try:
            actuator = self.registry.for_kind(action.kind)
            actuator.check(action, self.ctx)
        except Refused as exc:
            self._end(rec, "refused", str(exc), journal=False)
            return
        try:
            with self.guard.acquire(p.target):
                self.journal.begin(rec)
                self.audit.write("begin", rec)
                _crash_point("after-begin")
                try:
                    self.guard.record_applied(p, engines_total=max(1, len(self.ctx.engines)), record_id=rec.id)
                except Refused as exc:
                    self._end(rec, "refused", str(exc))
                    return
                try:
                    applied = await actuator.apply(action, self.ctx)
                except (ActuatorError, Refused) as exc:
                    self.guard.release(rec.id)
                    self._end(rec, "failed", str(exc))
                    self._page(rec, p.finding, failed=True)
                    return
                _crash_point("after-apply")
                rec.inverse = applied.inverse.to_dict() if applied.inverse is not None else None
                rec.steps = [*rec.steps, *applied.steps]
                self._set(rec, "applied", "applied; verifying")
                self.journal.step(rec.id, "applied", status="applied", inverse=rec.inverse, steps=rec.steps)
                self.audit.write("applied", rec)
                self.store.put(rec)
        except TargetBusy as exc:
            self._end(rec, "refused", f"busy: {exc}", journal=False)

    # ----- verification, rollback, reconciliation -----------------------------------------------

    async def verify(self, records: Sequence[ActionRecord], reread: Reread, *, wait_s: float,
                     interval_s: float = 5.0, sleep: Callable[[float], Awaitable[Any]] | None = None) -> None:
        """Re-read until each applied action is judged or `wait_s` passes (the rest is left to the next run)."""
        import asyncio

        nap = sleep or asyncio.sleep
        # A page is not journaled and has nothing to verify: it ended when it was sent (or kept for a retry).
        waiting = [r for r in records if r.status == "applied" and r.kind not in ESCALATING_KINDS]
        deadline = self.clock() + wait_s
        while waiting:
            signals = await reread()
            for rec in list(waiting):
                if await self._judge(rec, signals, final=False):
                    waiting.remove(rec)
            if not waiting or self.clock() >= deadline:
                break
            await nap(min(interval_s, max(0.0, deadline - self.clock())))

    async def _judge(self, rec: ActionRecord, signals: Mapping[str, Signals], *, final: bool) -> bool:
        """True when the record reached an end (verified or rolled back)."""
        spec = _spec(rec.verify)
        if spec is None:
            self._finish(rec, "verified", "nothing to verify for this action")
            return True
        after = _values(signals.get(rec.engine))
        rec.after = after
        met = spec.met(rec.before.get(spec.signal), after.get(spec.signal))
        if met:
            self._finish(rec, "verified", f"{spec.signal} {spec.direction} as required")
            return True
        overdue = self.clock() - rec.updated_at >= spec.within_s
        if met is False and (overdue or final):
            why = (f"{spec.signal} did not go {spec.direction} within {spec.within_s:g}s "
                   f"({rec.before.get(spec.signal)} -> {after.get(spec.signal)})")
            if spec.keep_on_fail:
                self._finish(rec, "failed", f"{why}; kept, not rolled back: taking the capacity away again would "
                                            "deepen the overload")
                self._page(rec, None, failed=True)
            else:
                await self.rollback(rec, why)
            return True
        if met is None and final:
            self._finish(rec, "verified", f"{spec.signal} not readable: kept, not judged")
            return True
        return False

    async def rollback(self, rec: ActionRecord, why: str) -> None:
        """Apply the inverse; escalate either way. Not now when the gate says no: the record stays applied in the
        journal, and the next cycle that may act judges it again."""
        if (held := self._held()) is not None:
            self.audit.write("rollback_deferred", rec, why=why, held=held)
            return
        if rec.inverse is None:
            self._finish(rec, "failed", f"{why}; no inverse to roll back with")
        else:
            inverse = _action(rec.inverse)
            try:
                await self.registry.for_kind(inverse.kind).apply(inverse, self.ctx)
                self._finish(rec, "rolled_back", why)
            except (ActuatorError, Refused) as exc:
                self._finish(rec, "failed", f"{why}; rollback failed: {exc}")
        self._page(rec, None, failed=True)

    async def reconcile(self, signals: Mapping[str, Signals]) -> list[ActionRecord]:
        """Finish what a killed doctor left: re-apply begun actions, judge applied ones.

        Each record under its target's lock, re-read from the journal once held: a record another doctor process
        (cron beside the daemon) is applying now, or finished meanwhile, is left to it.
        """
        done: list[ActionRecord] = []
        if self._held() is not None:
            return done  # a standby finishes nothing: the journal waits for this doctor's turn to act
        for rec in self.journal.unfinished():
            try:
                with self.guard.acquire(normalise(_action(rec.action))[1]):
                    fresh = self.journal.get(rec.id)
                    if fresh is None or rec.id in self.journal.finished_ids():
                        continue
                    done.append(await self._reconcile_one(fresh, signals))
            except TargetBusy:
                continue
        return done

    async def _reconcile_one(self, rec: ActionRecord, signals: Mapping[str, Signals]) -> ActionRecord:
        if rec.status != "applied":
            action = _action(rec.action)
            # Killed before its cooldown and budget slot were taken: take them now, as it is applied now (Refused:
            # taken already, killed after taking them, or spent; it was begun, so it is finished anyway).
            with contextlib.suppress(Refused):
                self.guard.record_applied(planned_of(rec), engines_total=max(1, len(self.ctx.engines)),
                                          record_id=rec.id)
            try:
                applied = await self.registry.for_kind(action.kind).apply(action, self.ctx)
            except (ActuatorError, Refused) as exc:
                self._finish(rec, "failed", f"interrupted, and finishing failed: {exc}")
                return rec
            rec.inverse = applied.inverse.to_dict() if applied.inverse is not None else rec.inverse
            self._set(rec, "applied", "interrupted; finished on restart")
            self.journal.step(rec.id, "applied on restart", status="applied", inverse=rec.inverse)
            self.audit.write("reconciled", rec)
        if not rec.before:
            rec.before = _values(signals.get(rec.engine))
        await self._judge(rec, signals, final=False)
        return rec

    # ----- lifting emergency limits early --------------------------------------------------------

    async def lift_idle_limits(self, signals: Mapping[str, Signals], findings: Sequence[Finding] = (), *,
                               refused_in_window: float | None = None,
                               skip: Collection[str] = ()) -> list[ActionRecord]:
        """Lift the doctor's own emergency length limits that are no longer needed (doctor.remedy.lift),
        unless one of this run's `findings` still proposes a length limit. `refused_in_window`: the requests the
        router refused for the limit over the last `length_limit_lift_after_s` (None: unknown, no history).

        Only in auto mode for the playbook that set the limit, never under the kill switch or in a maintenance
        window; like a rollback it returns the router to where it was, so it takes no budget or cooldown slot.
        Returns the records that ended (lifted, expired, or found gone or changed by someone else). Records in
        `skip` (those this cycle reconciled, re-applied after the signals were read) wait for the next cycle.
        """
        after_s = float(getattr(self.config, "length_limit_lift_after_s", 0.0) or 0.0)
        wanting = [f for f in findings if f.severity != "info" and any(a.kind == "length_limit" for a in f.remedies)]
        ended: list[ActionRecord] = []
        lifted: dict[int, ActionRecord] = {}  # tokens -> the record whose limit this call lifted
        for rec in self.store.recent(self.store.keep):
            tokens = limit_tokens(rec)
            if tokens is None or rec.id in skip:
                continue
            if tokens in lifted:  # an older record of the same limit (re-applied after its cooldown)
                self._end(rec, "expired", f"lifted early with {lifted[tokens].id}", journal=False)
                ended.append(rec)
                continue
            decision = judge(rec, signals, lift_after_s=after_s, queue_limits=self._queue_limits,
                             cooldown_left_s=self.guard.cooldown_left("length_limit", "router"), now=self.clock(),
                             refused_in_window=refused_in_window,
                             max_refusals=float(getattr(self.config, "length_limit_lift_max_refusals", 0)))
            if decision.done:  # bookkeeping only, in any mode: the limit is already gone or not the doctor's
                self._end(rec, "expired", decision.reason, journal=False)
                ended.append(rec)
            elif decision.lift and not wanting and self.config.mode_for(rec.playbook) == "auto" and \
                    self.guard.halted() is None and await self._lift(rec, tokens, decision.reason):
                ended.append(rec)
                lifted[tokens] = rec
        return ended

    async def _lift(self, rec: ActionRecord, tokens: int, why: str) -> bool:
        action = Action("length_limit", "router", {"max_tokens": None, "if_tokens": tokens}, risk="low",
                        description="lift the emergency length limit: no longer needed")
        try:
            with self.guard.acquire("router"):
                if self.store.get(rec.id).status != "verified":
                    return False  # another doctor process ended it while this one was reading
                if self._held() is not None:
                    return False
                self.audit.write("lifting", rec, why=why)
                applied = await self.registry.for_kind(action.kind).apply(action, self.ctx)
        except TargetBusy:
            return False  # another doctor is changing the router: next run
        except Refused as exc:  # changed by someone else in the meantime: theirs now
            self._end(rec, "expired", str(exc), journal=False)
            return True
        except ActuatorError as exc:
            self.audit.write("lift_failed", rec, error=str(exc))
            return False
        rec.steps = [*rec.steps, *applied.steps]
        self._end(rec, "expired", f"lifted early: {why}", journal=False)
        return True

    def _queue_limits(self, engine: str) -> Mapping[str, float]:
        from playbooks import registry

        return {**registry.get("queue_pressure").defaults, **self.config.params_for("queue_pressure", engine)}

    # ----- bookkeeping ---------------------------------------------------------------------------

    def _held(self) -> str | None:
        return self.gate() if self.gate is not None else None

    def _set(self, rec: ActionRecord, status: Any, reason: str) -> None:
        rec.status = status
        rec.reason = reason
        rec.updated_at = self.clock()

    def _end(self, rec: ActionRecord, status: Any, reason: str, *, journal: bool = True) -> None:
        self._set(rec, status, reason)
        if journal:
            self.journal.finish(rec.id, status, reason)
        self.store.put(rec)
        self.audit.write(status, rec)

    def _finish(self, rec: ActionRecord, status: Any, reason: str) -> None:
        self.guard.release(rec.id)
        self._end(rec, status, reason)

    def _page(self, rec: ActionRecord, finding: Finding | None, *, failed: bool = False) -> None:
        esc = Escalation(
            summary=(f"{rec.playbook} on {rec.engine}: {rec.kind} {rec.status}" if failed else
                     (finding.summary if finding else rec.reason)),
            engine=rec.engine, playbook=rec.playbook, action=rec.kind, action_status=rec.status,
            evidence="; ".join(e.text() for e in finding.evidence) if finding else rec.reason,
            runbook=finding.runbook if finding else "", finding_id=rec.finding_id)
        try:
            note = f"paged via {self._send(esc)}"
        except EscalationError as exc:
            self.outbox.keep(esc, rec.id, str(exc))
            note = f"escalation not delivered: {exc}; kept in {OUTBOX_FILE}, retried by every cycle until delivered"
        if not failed:
            self._set(rec, "applied", note)
        self.audit.write("escalated", rec, delivery=note)

    def _send(self, esc: Escalation) -> str:
        esc_cfg = getattr(self.config, "escalation", None)
        return escalate(esc, alertmanager_url=getattr(esc_cfg, "alertmanager_url", None),
                        webhook_url=getattr(esc_cfg, "webhook_url", None), clock=self.clock)

    def retry_escalations(self) -> list[str]:
        """Send the escalations earlier cycles could not deliver, oldest first, each audited; stops at the first
        that fails again (the receiver is still down: the rest wait for the next cycle). Returns the delivered
        records' ids."""
        sent = []
        for u in self.outbox.pending():
            fields = {"id": u.record, "engine": u.escalation.engine, "playbook": u.escalation.playbook,
                      "action": u.escalation.action, "first_tried_at": u.first_at}
            try:
                where = self._send(u.escalation)
            except EscalationError as exc:
                self.outbox.keep(u.escalation, u.record, str(exc))
                self.audit.note("escalation_retry_failed", **fields, attempts=u.attempts + 1,
                                delivery=f"escalation not delivered: {exc}; kept, retried by the next cycle")
                break
            self.outbox.delivered(u.key)
            self.audit.note("escalated", **fields, attempts=u.attempts + 1, retried=True,
                            delivery=f"paged via {where} (attempt {u.attempts + 1})")
            sent.append(u.record)
        return sent


def _values(signals: Signals | None) -> dict[str, float | None]:
    if signals is None:
        return {}
    return {k: (float(v) if isinstance(v, int | float) else None) for k, v in signals.values.items()}
