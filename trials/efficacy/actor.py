"""The doctor in auto mode in an efficacy run: the first remedy of each finding, behind simplified guardrails (one
action per target per cycle, a cooldown per action and target, an hourly budget, a lock per engine), verified with
the planner's own specs and rolled back when it did not help. The actuators are in engine_ops and router_ops.
Cooldown, budget, verification window, bounds and the lift's settings are the doctor's config (its real
defaults unless a run is given another DoctorConfig)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from collectors.types import Signals
from doctor.config import DoctorConfig
from doctor.remedy.lift import already_in_force, judge, limit_tokens
from doctor.remedy.model import ActionRecord, Refused, VerifySpec
from doctor.remedy.planner import ROUTER_KINDS, verify_spec
from playbooks import registry
from playbooks.model import Action, Finding
from trials.efficacy.attempt import Attempt
from trials.efficacy.engine_ops import EngineHook, EngineOps
from trials.efficacy.harness import EfficacyHarness
from trials.efficacy.router_ops import apply_router_action
from trials.efficacy.vrouter import VirtualRouter

VERIFY_QUEUE = ("length_limit", "scale_out", "set_max_in_flight", "stop_routing")


class HarnessDoctor(EngineOps):
    """Applies the first remedy of each warning or critical finding to the harness, as doctor's actuators do."""

    def __init__(self, h: EfficacyHarness, router: VirtualRouter, *, gpus: int, config: DoctorConfig,
                 on_engine: EngineHook) -> None:
        self.h, self.router, self.config = h, router, config
        self.gpus, self.cooldown_s, self.verify_s = gpus, config.cooldown_s, config.verify_s
        self.on_engine = on_engine
        self.log: list[Attempt] = []
        self.owned = {n: e.core.config.gpus for n, e in h.engines.items()}
        self._busy = {}
        self._last: dict[tuple[str, str, str], float] = {}
        self.renamed = {}

    # ----- one cycle ---------------------------------------------------------------------------

    def cycle(self, now: float, findings: Sequence[Finding], signals: dict[str, Signals]) -> None:
        self._verify(now, findings, signals)
        self._lift(now, findings, signals)
        used: set[str] = set()
        for f in findings:  # already most severe first, then playbook precedence
            if f.severity == "info" or not f.remedies or f.remedies[0].kind == "escalate":
                continue
            a = f.remedies[0]
            engine = str(a.params.get("engine", f.engine)) if a.kind in ROUTER_KINDS else a.target
            key = (a.kind, a.target, engine)
            if a.target in used or self.busy(engine) or now - self._last.get(key, -math.inf) < self.cooldown_s:
                continue
            used.add(a.target)
            spent = sum(now - x.decided < 3600 and x.record.status != "refused" for x in self.log) >= \
                self.config.hourly_action_budget
            router = {"router": Signals("router", 0.0, values=self.router.length_limit_signals())}
            in_force = already_in_force(a, router)
            act = self._start(a, f, now, signals, refuse="hourly action budget spent" if spent else in_force or None)
            if act.record.status != "refused":  # as the guardrails: only an action taken starts a cooldown
                self._last[key] = now

    def _start(self, a: Action, f: Finding | None, now: float, signals: dict[str, Signals],
               trigger: str = "auto", refuse: str | None = None) -> Attempt:
        rec = ActionRecord(a.to_dict(), f.engine if f else a.target, f.playbook if f else "-", f.id if f else "-",
                           trigger=trigger, id=f"act-{len(self.log) + 1}", created_at=now, updated_at=now)
        act = Attempt(rec, a, f, now)
        self.log.append(act)
        if f is not None and f.evidence:
            act.verify = verify_spec(f.playbook, a.kind) or _verify_spec(a, f, self.verify_s)
            sig = signals.get(f.engine)
            act.before = sig.get(act.verify.signal) if sig else None
            rec.verify = {"signal": act.verify.signal, "direction": act.verify.direction, "ratio": act.verify.ratio,
                          "within_s": self.verify_s}
        try:
            if refuse:
                raise Refused(refuse)
            act.inverse = self._apply(a, act)
        except Refused as exc:
            rec.status, rec.reason = "refused", str(exc)
            return act
        rec.status = "applied"
        rec.inverse = act.inverse.to_dict() if act.inverse else None
        return act


    def _verify(self, now: float, findings: Sequence[Finding], signals: dict[str, Signals]) -> None:
        for act in list(self.log):
            v, rec = act.verify, act.record
            if rec.status != "applied" or v is None or act.effective is None or now < act.effective + v.within_s:
                continue
            assert act.finding is not None
            engine = self.current(act.finding.engine)  # after a blue/green swap: the engine that replaced it
            still = any(f.playbook == act.finding.playbook and f.engine == engine for f in findings)
            sig = signals.get(engine)
            after = sig.get(v.signal) if sig else None
            rec.before, rec.after = {v.signal: act.before}, {v.signal: after}
            if not still or v.met(act.before, after) is not False:
                rec.status = "verified"
                continue
            if v.keep_on_fail:
                rec.status, rec.reason = "failed", f"{v.signal} did not improve: kept, escalated"
                continue
            if act.inverse is None:
                rec.status, rec.reason = "failed", f"{v.signal} did not improve and there is no inverse: escalated"
                continue
            rec.status, rec.reason = "rolled_back", f"{v.signal} did not improve within {v.within_s:g}s"
            self._start(act.inverse, None, now, signals, trigger=f"rollback:{rec.id}")

    def _lift(self, now: float, findings: Sequence[Finding], signals: dict[str, Signals]) -> None:
        """Lift this doctor's own emergency length limits early, as doctor.remedy.lift decides for the real one."""
        wanted = any(f.severity != "info" and any(a.kind == "length_limit" for a in f.remedies) for f in findings)
        router = self.router.length_limit_signals()
        seen = {n: replace(s, values={**s.values, **router}) for n, s in signals.items()}
        queue = registry.get("queue_pressure").defaults
        lift_after_s = self.config.length_limit_lift_after_s
        refused = self.router.length_limit.refusals_since(now - lift_after_s)
        for act in self.log:
            rec = act.record
            if limit_tokens(rec) is None or act.finding is None:
                continue
            last = self._last.get(("length_limit", "router", act.finding.engine), -math.inf)
            d = judge(rec, seen, lift_after_s=lift_after_s, queue_limits=lambda _: queue,
                      cooldown_left_s=max(0.0, self.cooldown_s - (now - last)), now=now,
                      refused_in_window=float(refused),
                      max_refusals=float(self.config.length_limit_lift_max_refusals))
            if d.done or (d.lift and not wanted):
                if d.lift:
                    apply_router_action(self.router, self.h, Action("length_limit", "router", {"max_tokens": None}),
                                        self.config)
                rec.status, rec.reason = "expired", ("lifted early: " if d.lift else "") + d.reason
                rec.updated_at = now

    # ----- actuators ---------------------------------------------------------------------------

    def _apply(self, a: Action, act: Attempt) -> Action | None:
        if a.target == "router" or a.kind in ROUTER_KINDS:
            inverse = apply_router_action(self.router, self.h, a, self.config)
            self._done(act)
            return inverse
        name = a.target
        if name not in self.h.engines:
            raise Refused(f"unknown engine {name!r}")
        p = a.params
        if a.kind == "relaunch":
            if "argv" in p:  # a rollback: the exact previous command line
                argv, env = list(p["argv"]), dict(p["env"])
                self.owned[name] = tuple(p.get("gpus", self.owned[name]))
            else:
                argv, env = self._changed_argv(name, p), dict(self.h.argv[name][1])
            return self._relaunch(name, argv, env, act)
        if a.kind == "scale_out":
            if "remove_replica" in p:
                self._remove(str(p["remove_replica"]), act)
                return None
            if "tensor_parallel_size" in p:
                return self._scale_tp(name, p["tensor_parallel_size"], act)
            return self._add_replica(name, act)
        if a.kind == "defragment":
            return self._defragment(name, a, act)
        if a.kind == "warm_up":
            self.h.warm_up(name, at=self.h.now, batches=p.get("batches", (4, 8, 16)),
                           prompt_tokens=p.get("prompt_tokens", (512, 1024, 2048)))
        elif a.kind == "reset_prefix_cache":
            self.h.engines[name].core.reset_prefix_cache()
        elif a.kind == "rewarm_prefix_cache":
            self._rewarm(name, int(p.get("variations", 20)))
        else:
            raise Refused(f"{a.kind} is not modelled by the harness actuators")
        self._done(act)
        return None


    def describe(self, act: Attempt, t0: float) -> dict[str, Any]:
        rec = act.record
        return {"id": rec.id, "t_s": act.decided - t0, "effective_s": None if act.effective is None
                else act.effective - t0, "action": rec.kind, "target": rec.target,
                "params": {k: v for k, v in rec.action["params"].items() if k not in ("argv", "env")},
                "playbook": rec.playbook, "engine": rec.engine, "trigger": rec.trigger, "status": rec.status,
                "reason": rec.reason, "verify": rec.verify, "before": rec.before, "after": rec.after,
                "steps": list(rec.steps)}



def _verify_spec(a: Action, f: Finding, within_s: float) -> VerifySpec:
    """Where doctor.remedy.planner.VERIFY has nothing for the action, what must improve: the queue for admission
    and capacity changes (the finding's latency evidence lags them by the backlog's drain time), else the finding's
    first evidence; by 10% or the finding clears."""
    if a.kind in VERIFY_QUEUE:
        return VerifySpec("waiting", "down", ratio=0.9, within_s=within_s)
    ev = f.evidence[0]
    up = ev.comparison.startswith("<")
    return VerifySpec(ev.signal, "up" if up else "down", ratio=1.1 if up else 0.9, within_s=within_s)

