"""Remediation efficacy: paired runs of an incident scenario in virtual time, without and with the doctor acting.

Both runs share the trace, the seed and the deployment: the scenario's engines in `sim.harness`, behind a
virtual-time router with the real router's policy semantics (router.policy.Policy: length limit -> 413,
route threshold, per-upstream max in flight with a queue per role released shortest-first with the
fairness window and the batch timeout, upstream states, fail-over to the other role where the prompt fits).
Every `eval_every_s` the doctor reads the engines as `doctor diagnose` does (doctor.accuracy.Observer) and
runs the playbooks. In `observe` mode it stops there; in `auto` mode `HarnessDoctor` applies the first remedy
of each warning or critical finding through harness actuators that act as the real ones do (router policy
changes; drain -> stop -> start after the modelled start-up -> warm up -> resume for relaunches; /sleep +
/wake_up for defragment; a replica or tensor-parallel shards on free simulated GPUs), behind simplified
guardrails: one action per target per cycle, a cooldown per action and target, an hourly budget, parameter
bounds, a lock per engine while a change is under way, and verification with rollback by the inverse.
`measure` turns the requests' client-side view into the comparison's numbers.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from collectors.combine import build_signals
from collectors.types import Signals
from doctor.accuracy import (
    WARMUP_S,
    MemoryHistory,
    Observer,
    ScenarioHarness,
    ScenarioSettings,
    _config_from_argv,
    _history_at,
    _Watch,
)
from doctor.pipeline import build_views, run_playbooks
from doctor.remedy.model import ActionRecord, Refused, VerifySpec
from playbooks.model import Action, Finding
from router.policy import (
    ROLES,
    Policy,
    PolicyError,
    UpstreamSpec,
    check_limits,
    diff,
    initial_policy,
    with_upstream_state,
)
from sim.engine import EngineStartError
from sim.harness import ClientRecord
from sim.scenarios import Scenario
from sim.workload import RequestSpec

LONG_CLASS_TOKENS = 5120  # request classes: short < 5120 prompt tokens <= long
TTFT_SLO_S = 2.0  # goodput and recovery SLOs (vllm bench serve semantics: both must hold)
TPOT_SLO_S = 0.100
WINDOW_S = 30.0  # recovery windows (the doctor's cadence)
PEAK_WINDOW_S = 10.0  # peak QPS: the most completions (within SLO, for goodput) in a 10 s window
HEALTH_EVERY_S = 2.0  # the router's health loop
COOLDOWN_S = 600.0  # per action kind + target
VERIFY_S = 120.0  # after an action is in effect, what it should improve must have improved
DRAIN_LIMIT_S = 900.0  # after the trace ends, requests still in flight get this long to finish
# The capacity probe (peak QPS within SLO): after the incident and the drain, with the doctor no longer acting,
# the incident's own request mix arrives at a rate ramping from PROBE_FROM to PROBE_TO times the incident's mean
# rate over PROBE_S; the most requests served within the SLOs in a PEAK_WINDOW_S window is the deployment's
# capacity as the incident (and the doctor) left it.
PROBE_FROM, PROBE_TO, PROBE_S, PROBE_TAIL_S = 0.5, 3.0, 450.0, 60.0


# ----- the harness and the client's view of a request --------------------------------------------------------


@dataclass
class _Tracked(ClientRecord):
    """A ClientRecord that calls back once when it finishes (the router releases the slot)."""

    on_finish: Callable[[], None] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "finished" and value is not None:
            cb = getattr(self, "on_finish", None)
            if cb is not None:
                object.__setattr__(self, "on_finish", None)
                cb()


class EfficacyHarness(ScenarioHarness):
    """ScenarioHarness whose engine-side records can tell the router when they finish."""

    def submit(self, engine_name: str, spec: RequestSpec, *, at: float | None = None, ignore_eos: bool = True,
               on_finish: Callable[[], None] | None = None) -> ClientRecord:
        sent = self.start + spec.arrival_s if at is None else at
        record = _Tracked(engine_name, spec, sent, on_finish=on_finish)
        self.records.append(record)
        self._at(sent, lambda: self._arrive(record, ignore_eos))
        return record

    def kick(self, name: str) -> None:
        self._kick(self.engines[name])


@dataclass(eq=False)
class Outcome:
    """One client request as the client saw it, through the router."""

    spec: RequestSpec
    sent: float
    role: str | None = None
    upstream: str | None = None
    rejected: int | None = None  # HTTP status the router answered itself (413, 429, 503)
    record: ClientRecord | None = None

    @property
    def cls(self) -> str:
        return "long" if self.spec.prompt_tokens >= LONG_CLASS_TOKENS else "short"

    @property
    def result(self) -> str:
        """ok | rejected (413) | failed (429/503/engine error) | unfinished."""
        if self.rejected == 413:
            return "rejected"
        if self.rejected is not None:
            return "failed"
        r = self.record
        if r is None or r.finished is None:
            return "unfinished"
        return "ok" if r.error is None else "failed"

    @property
    def ttft(self) -> float | None:
        r = self.record
        return None if r is None or r.first_token is None else r.first_token - self.sent

    @property
    def e2e(self) -> float | None:
        r = self.record
        return None if r is None or r.finished is None else r.finished - self.sent

    @property
    def tpot(self) -> float | None:
        r = self.record
        if r is None or r.first_token is None or r.finished is None or r.tokens < 2:
            return 0.0 if r is not None and r.finished is not None else None
        return (r.finished - r.first_token) / (r.tokens - 1)

    @property
    def good(self) -> bool:
        ttft, tpot = self.ttft, self.tpot
        return self.result == "ok" and ttft is not None and ttft <= TTFT_SLO_S and (tpot or 0.0) <= TPOT_SLO_S


# ----- the virtual router --------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Waiter:
    seq: int
    role: str
    tokens: int
    arrived: float
    out: Outcome
    passed: int = 0


class VirtualRouter:
    """The router's policy semantics (router/proxy.py, router/admission.py) on the harness's virtual clock."""

    def __init__(self, h: EfficacyHarness, policy: Policy) -> None:
        self.h = h
        self.policy = policy
        self.in_flight: dict[str, int] = {}
        self.down: set[str] = set()  # upstreams whose engine is stopped for a change
        self.queues: dict[str, list[_Waiter]] = {r: [] for r in ROLES}
        self.outcomes: list[Outcome] = []
        self.changes: list[tuple[float, str]] = []  # (virtual time, policy diff line)
        self._due: dict[str, float | None] = {r: None for r in ROLES}
        self._seq = 0
        h.schedule(h.now + HEALTH_EVERY_S, self._health)

    # ----- policy and upstreams ------------------------------------------------------------------

    def set_policy(self, new: Policy) -> list[str]:
        changes = diff(self.policy, new)
        self.policy = new
        self.changes += [(self.h.now, c) for c in changes]
        self.pump_all()
        return changes

    def upstream(self, name: str) -> tuple[str, UpstreamSpec] | None:
        for role, u in self.policy.all_upstreams():
            if u.name == name:
                return role, u
        return None

    def healthy(self, name: str) -> bool:
        e = self.h.engines.get(name)
        return e is not None and not e.core.dead and name not in self.down

    def _eligible(self, role: str) -> list[UpstreamSpec]:
        return [u for u in self.policy.upstreams.get(role, ()) if u.state == "active" and self.healthy(u.name)]

    def fits(self, role: str, tokens: int) -> bool:
        return any(tokens < self.h.engines[u.name].core.config.max_model_len for u in self._eligible(role))

    def _best(self, ups: list[UpstreamSpec]) -> UpstreamSpec | None:
        best, room = None, 0
        for u in ups:
            free = u.max_in_flight - self.in_flight.get(u.name, 0)
            if free > room:
                best, room = u, free
        return best

    def _health(self) -> None:
        self.pump_all()
        self.h.schedule(self.h.now + HEALTH_EVERY_S, self._health)

    # ----- requests ------------------------------------------------------------------------------

    def submit(self, spec: RequestSpec, at: float) -> Outcome:
        out = Outcome(spec, at)
        self.outcomes.append(out)
        self.h.schedule(at, functools.partial(self._arrive, out))
        return out

    def _arrive(self, out: Outcome) -> None:
        pol, now, tokens = self.policy, self.h.now, out.spec.prompt_tokens
        if pol.length_limit_tokens is not None and tokens > pol.length_limit_tokens and pol.length_limit_active(now):
            out.rejected = 413
            return
        routed = "hot" if tokens < pol.route_threshold_tokens else "cold"
        role = routed if self._eligible(routed) else ("cold" if routed == "hot" else "hot")
        out.role = routed
        if role != routed and not self.fits(role, tokens):
            out.rejected = 503
            return
        out.role = role
        q = self.queues[role]
        if not q and pol.batch_timeout_ms == 0:
            u = self._best(self._eligible(role))
            if u is not None:
                self._dispatch(u, out)
                return
        if len(q) >= pol.max_queue:
            out.rejected = 429
            return
        self._seq += 1
        q.append(_Waiter(self._seq, role, tokens, now, out))
        self.pump(role)

    def _dispatch(self, u: UpstreamSpec, out: Outcome) -> None:
        self.in_flight[u.name] = self.in_flight.get(u.name, 0) + 1
        out.upstream = u.name
        out.record = self.h.submit(u.name, out.spec, at=self.h.now, on_finish=functools.partial(self._release, u.name))

    def _release(self, name: str) -> None:
        self.in_flight[name] -= 1
        found = self.upstream(name)
        if found is not None:
            self.pump(found[0])

    # ----- the release rule ----------------------------------------------------------------------

    def pump(self, role: str) -> None:
        q = self.queues[role]
        if not q:
            return
        ups = self._eligible(role)
        if not ups:
            self._reroute(role)
            return
        free = sum(max(0, u.max_in_flight - self.in_flight.get(u.name, 0)) for u in ups)
        if free <= 0:
            return
        pol, now = self.policy, self.h.now
        wait_s = pol.batch_timeout_ms / 1000.0
        if wait_s > 0 and len(q) < free and now < q[0].arrived + wait_s:
            self._arm(role, q[0].arrived + wait_s)
            return
        for _ in range(min(len(q), free)):
            w = _pick(q, pol.fairness_window)
            u = self._best(ups)
            assert u is not None
            self._dispatch(u, w.out)
        if q and wait_s > 0:
            self._arm(role, max(now, q[0].arrived + wait_s))

    def _arm(self, role: str, due: float) -> None:
        cur = self._due[role]
        if cur is not None and cur <= due:
            return
        self._due[role] = due

        def fire() -> None:
            if self._due[role] == due:
                self._due[role] = None
                self.pump(role)

        self.h.schedule(due, fire)

    def _reroute(self, role: str) -> None:
        """`role` has no eligible upstream: waiters move to the other role where they fit, else fail (503)."""
        q = self.queues[role]
        dest = "cold" if role == "hot" else "hot"
        moved = False
        for w in q:
            if self._eligible(dest) and self.fits(dest, w.tokens):
                w.role = dest
                self.queues[dest].append(w)
                moved = True
            else:
                w.out.rejected = 503
        q.clear()
        if moved:
            self.queues[dest].sort(key=lambda w: (w.arrived, w.seq))
            self.pump(dest)

    def pump_all(self) -> None:
        for role in ROLES:
            if self.queues[role] and not self._eligible(role):
                self._reroute(role)
        for role in ROLES:
            self.pump(role)


def _pick(q: list[_Waiter], window: int) -> _Waiter:
    """Shortest prompt first, except that a waiter passed by `window` later ones goes next (admission._pick)."""
    if window <= 0 or len(q) == 1:
        return q.pop(0)
    idx = next((i for i, w in enumerate(q) if w.passed >= window), -1)
    if idx < 0:
        idx = min(range(len(q)), key=lambda i: (q[i].tokens, q[i].seq))
    for w in q[:idx]:
        w.passed += 1
    return q.pop(idx)


# ----- the doctor in auto mode: harness actuators behind simplified guardrails ------------------------------

DRAIN_TIMEOUT_S = 300.0  # a drain waits this long for in-flight requests, else the change is abandoned
SETTLE_S = 5.0  # after the last warm-up group is sent, before the router resumes the engine
BATCH_TIMEOUT_BOUNDS_MS = (50, 200)
BUDGET_PER_HOUR = 6
ROUTER_KINDS = ("set_batch_timeout", "set_max_in_flight", "length_limit", "set_route_threshold", "set_fairness_window",
                "stop_routing")
_FLAGS = {"max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
          "gpu_memory_utilization": "--gpu-memory-utilization", "max_model_len": "--max-model-len",
          "tensor_parallel_size": "--tensor-parallel-size", "api_server_count": "--api-server-count"}
VERIFY_QUEUE = ("length_limit", "scale_out", "set_max_in_flight", "stop_routing")
EngineHook = Callable[[str, str | None, Sequence[str], dict[str, str], bool], None]


@dataclass(eq=False)
class _Act:
    """One attempt: the contract's ActionRecord plus what the harness needs to verify and undo it."""

    record: ActionRecord
    action: Action
    finding: Finding | None
    decided: float
    effective: float | None = None
    inverse: Action | None = None
    verify: VerifySpec | None = None
    before: float | None = None


def _set_flag(argv: Sequence[str], flag: str, value: object) -> list[str]:
    out = list(argv)
    if value is True or value is False:
        out = [a for a in out if a not in (flag, "--no-" + flag[2:])]
        return [*out, flag if value else "--no-" + flag[2:]]
    if flag in out:
        out[out.index(flag) + 1] = str(value)
    else:
        out += [flag, str(value)]
    return out


class HarnessDoctor:
    """Applies the first remedy of each warning or critical finding to the harness, as doctor's actuators do."""

    def __init__(self, h: EfficacyHarness, router: VirtualRouter, *, gpus: int, cooldown_s: float, verify_s: float,
                 on_engine: EngineHook) -> None:
        self.h, self.router = h, router
        self.gpus, self.cooldown_s, self.verify_s = gpus, cooldown_s, verify_s
        self.on_engine = on_engine
        self.log: list[_Act] = []
        self.owned: dict[str, tuple[int, ...]] = {n: e.core.config.gpus for n, e in h.engines.items()}
        self._busy: dict[str, int] = {}
        self._last: dict[tuple[str, str, str], float] = {}

    def busy(self, name: str) -> bool:
        return self._busy.get(name, 0) > 0

    def free_gpus(self) -> list[int]:
        used = {g for gs in self.owned.values() for g in gs}
        return [g for g in range(self.gpus) if g not in used]

    # ----- one cycle ---------------------------------------------------------------------------

    def cycle(self, now: float, findings: Sequence[Finding], signals: dict[str, Signals]) -> None:
        self._verify(now, findings, signals)
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
            self._last[key] = now
            spent = sum(now - x.decided < 3600 and x.record.status != "refused" for x in self.log) >= BUDGET_PER_HOUR
            self._start(a, f, now, signals, refuse="hourly action budget spent" if spent else None)

    def _start(self, a: Action, f: Finding | None, now: float, signals: dict[str, Signals],
               trigger: str = "auto", refuse: str | None = None) -> _Act:
        rec = ActionRecord(a.to_dict(), f.engine if f else a.target, f.playbook if f else "-", f.id if f else "-",
                           trigger=trigger, id=f"act-{len(self.log) + 1}", created_at=now, updated_at=now)
        act = _Act(rec, a, f, now)
        self.log.append(act)
        if f is not None and f.evidence:
            act.verify = _verify_spec(a, f, self.verify_s)
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

    def _done(self, act: _Act, error: str | None = None) -> None:
        act.record.updated_at = self.h.now
        if error is not None:
            act.record.status, act.record.reason = "failed", error
        else:
            act.effective = self.h.now
        act.record.steps.append(f"t={self.h.now - self.h.start - WARMUP_S:.0f}s " + (error or "in effect"))

    def _verify(self, now: float, findings: Sequence[Finding], signals: dict[str, Signals]) -> None:
        for act in list(self.log):
            v, rec = act.verify, act.record
            if rec.status != "applied" or v is None or act.effective is None or now < act.effective + v.within_s:
                continue
            assert act.finding is not None
            still = any(f.playbook == act.finding.playbook and f.engine == act.finding.engine for f in findings)
            sig = signals.get(act.finding.engine)
            after = sig.get(v.signal) if sig else None
            rec.before, rec.after = {v.signal: act.before}, {v.signal: after}
            if not still or v.met(act.before, after) is not False:
                rec.status = "verified"
                continue
            if act.inverse is None:
                rec.status, rec.reason = "failed", f"{v.signal} did not improve and there is no inverse: escalated"
                continue
            rec.status, rec.reason = "rolled_back", f"{v.signal} did not improve within {v.within_s:g}s"
            self._start(act.inverse, None, now, signals, trigger=f"rollback:{rec.id}")

    # ----- actuators ---------------------------------------------------------------------------

    def _apply(self, a: Action, act: _Act) -> Action | None:
        if a.target == "router" or a.kind in ROUTER_KINDS:
            inverse = self._router(a)
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

    def _router(self, a: Action) -> Action | None:
        pol, now, p = self.router.policy, self.h.now, a.params
        engine = str(p.get("engine", a.target))
        if a.kind == "length_limit":
            tokens = p.get("max_tokens")
            if tokens is None:
                new = replace(pol, length_limit_tokens=None, length_limit_expires_at=None)
            elif isinstance(tokens, int):
                new = replace(pol, length_limit_tokens=tokens,
                              length_limit_expires_at=now + float(p.get("expires_in_s", 3600)))
            else:
                raise Refused(f"length_limit: max_tokens must be a number, got {tokens!r}")
            old = pol.length_limit_tokens if pol.length_limit_active(now) else None
            inv: dict[str, Any] = {"max_tokens": old}
        elif a.kind == "set_route_threshold":
            new = replace(pol, route_threshold_tokens=_int(p, "threshold_tokens", 1))
            inv = {"threshold_tokens": pol.route_threshold_tokens}
        elif a.kind == "set_batch_timeout":
            ms = p.get("batch_timeout_ms")
            lo, hi = BATCH_TIMEOUT_BOUNDS_MS
            if ms is not None and (not isinstance(ms, int) or not lo <= ms <= hi):
                raise Refused(f"set_batch_timeout: {ms!r} ms is outside the bounds {lo}..{hi} ms")
            new = replace(pol, batch_timeout_ms=ms or 0)
            inv = {"engine": engine, "batch_timeout_ms": pol.batch_timeout_ms or None}
        elif a.kind == "set_fairness_window":
            new = replace(pol, fairness_window=_int(p, "window", 0))
            inv = {"window": pol.fairness_window}
        elif a.kind in ("set_max_in_flight", "stop_routing"):
            found = self.router.upstream(engine)
            if found is None:
                raise Refused(f"{a.kind}: the router has no upstream {engine!r}")
            u = found[1]
            if a.kind == "set_max_in_flight":
                cap = 256 if p.get("max_in_flight") is None else _int(p, "max_in_flight", 1)
                new = replace(pol, upstreams={r: tuple(replace(x, max_in_flight=cap) if x.name == engine else x
                                                       for x in ups) for r, ups in pol.upstreams.items()})
                inv = {"engine": engine, "max_in_flight": u.max_in_flight}
            else:
                state = str(p.get("state") or ("active" if p.get("resume") else "draining"))
                new = with_upstream_state(pol, engine, state)
                inv = {"engine": engine, "state": u.state}
        else:
            raise Refused(f"{a.kind} is not a router action")
        mml = {n: e.core.config.max_model_len for n, e in self.h.engines.items()}
        try:
            check_limits(new, mml, now=now, previous=pol)
        except PolicyError as exc:
            raise Refused(f"{a.kind}: {exc}") from None
        if not self.router.set_policy(new):
            raise Refused(f"{a.kind}: already in effect")
        return Action(a.kind, "router", inv)

    def _changed_argv(self, name: str, p: Any) -> list[str]:
        argv = list(self.h.argv[name][0])
        changed = False
        for key, value in p.items():
            if key == "enable_chunked_prefill":
                argv, changed = _set_flag(argv, "--enable-chunked-prefill", bool(value)), True
            elif key in _FLAGS:
                if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                    raise Refused(f"relaunch: {key} must be a positive number, got {value!r}")
                argv, changed = _set_flag(argv, _FLAGS[key], value), True
        if not changed and not p.get("reason"):
            raise Refused(f"relaunch: nothing to change in {dict(p)}")
        return argv

    def _restore(self, name: str) -> Action:
        argv, env = self.h.argv[name]
        return Action("relaunch", name, {"argv": list(argv), "env": dict(env), "gpus": list(self.owned[name])})

    def _relaunch(self, name: str, argv: list[str], env: dict[str, str], act: _Act) -> Action:
        inverse = self._restore(name)
        self._drain(name, lambda: self._stop_start(name, argv, env, act, inverse), act)
        return inverse

    def _scale_tp(self, name: str, tp: Any, act: _Act) -> Action:
        have = self.owned[name]
        if not isinstance(tp, int) or tp <= len(have):
            raise Refused(f"scale_out: tensor_parallel_size {tp!r} is not above the current {len(have)}")
        free = self.free_gpus()
        if len(free) < tp - len(have):
            raise Refused(f"scale_out: tensor_parallel_size {tp} needs {tp - len(have)} more GPU(s); "
                          f"{len(free)} free")
        inverse = self._restore(name)
        gpus = (*have, *free[:tp - len(have)])
        self.owned[name] = gpus
        argv = _set_flag(self.h.argv[name][0], "--tensor-parallel-size", tp)
        env = {**self.h.argv[name][1], "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        self._drain(name, lambda: self._stop_start(name, argv, env, act, inverse), act)
        return inverse

    def _drain(self, name: str, then: Callable[[], None], act: _Act, timeout_s: float | None = DRAIN_TIMEOUT_S) -> None:
        """Stop routing new requests to `name`, wait for its in-flight ones, then `then()`. When they are not done
        within `timeout_s` the change is abandoned and the engine resumed: a drain never drops requests."""
        self._busy[name] = self._busy.get(name, 0) + 1
        if self.router.upstream(name) is not None:
            self.router.set_policy(with_upstream_state(self.router.policy, name, "draining"))
        act.record.steps.append(f"drain {name}")
        t0 = self.h.now

        def wait() -> None:
            left = self.router.in_flight.get(name, 0)
            if left == 0:
                then()
            elif timeout_s is not None and self.h.now - t0 >= timeout_s:
                self._resume(name, act, f"drain of {name} did not finish within {timeout_s:g}s ({left} requests "
                                        "still in flight): change abandoned, engine resumed")
            else:
                self.h.schedule(self.h.now + 1.0, wait)

        wait()

    def _resume(self, name: str, act: _Act, error: str | None = None) -> None:
        self.router.down.discard(name)
        if self.router.upstream(name) is not None:
            self.router.set_policy(with_upstream_state(self.router.policy, name, "active"))
        self._busy[name] -= 1
        self._done(act, error)

    def _stop_start(self, name: str, argv: list[str], env: dict[str, str], act: _Act, inverse: Action) -> None:
        old = self.h.engines[name]
        self.router.down.add(name)
        old.core.kill(self.h.now, "stopped by the doctor for a relaunch")
        old.core.release_gpus()
        act.record.steps.append(f"stop {name}; start {' '.join(argv[1:])}")

        def start() -> None:
            try:
                self.h.add_engine(name, argv, env=env)
            except EngineStartError as exc:  # put the previous engine back
                first = str(exc).splitlines()[0]
                prev = inverse.params
                self.owned[name] = tuple(prev["gpus"])
                self.h.add_engine(name, list(prev["argv"]), env=dict(prev["env"]))
                self.on_engine(name, old_role, prev["argv"], dict(prev["env"]), True)
                self._resume(name, act, f"start failed ({first}); previous engine restarted")
                return
            self.on_engine(name, old_role, argv, env, True)
            t_last = self.h.warm_up(name, at=self.h.now)
            self.h.schedule(t_last + SETTLE_S, lambda: self._resume(name, act))

        found = self.router.upstream(name)
        old_role = found[0] if found else None
        self.h.schedule(self.h.now + old.core.preset.startup_s, start)

    def _add_replica(self, name: str, act: _Act) -> Action:
        found = self.router.upstream(name)
        if found is None:
            raise Refused(f"scale_out: {name} is not behind the router")
        role, spec = found
        argv, env = self.h.argv[name]
        need = len(self.owned[name])
        free = self.free_gpus()
        if len(free) < need:
            raise Refused(f"scale_out: a replica of {name} needs {need} free GPU(s); {len(free)} free")
        k = 2
        while f"{name}-{k}" in self.h.engines or f"{name}-{k}" in self.owned:
            k += 1
        new = f"{name}-{k}"
        self.owned[new] = tuple(free[:need])
        env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, self.owned[new]))}
        self._busy[name] = self._busy.get(name, 0) + 1
        act.record.steps.append(f"start replica {new} on GPU {env['CUDA_VISIBLE_DEVICES']}")

        def start() -> None:
            try:
                self.h.add_engine(new, list(argv), env=env)
            except EngineStartError as exc:
                self.owned.pop(new, None)
                self._busy[name] -= 1
                self._done(act, f"replica start failed ({str(exc).splitlines()[0]})")
                return
            self.on_engine(new, role, argv, env, True)
            t_last = self.h.warm_up(new, at=self.h.now)
            self.h.schedule(t_last + SETTLE_S, join)

        def join() -> None:
            pol = self.router.policy
            ups = (*pol.upstreams.get(role, ()), UpstreamSpec(new, f"sim://{new}", "active", spec.max_in_flight))
            self.router.set_policy(replace(pol, upstreams={**pol.upstreams, role: ups}))
            self._busy[name] -= 1
            self._done(act)

        self.h.schedule(self.h.now + self.h.engines[name].core.preset.startup_s, start)
        return Action("scale_out", name, {"remove_replica": new})

    def _remove(self, new: str, act: _Act) -> None:
        def stop() -> None:
            self.h.engines[new].core.kill(self.h.now, "replica removed by the doctor")
            self.h.engines[new].core.release_gpus()
            self.router.set_policy(without(self.router.policy, new))
            self.owned.pop(new, None)
            self.on_engine(new, None, (), {}, True)
            self._busy[new] -= 1
            self._done(act)

        self._drain(new, stop, act, timeout_s=None)

    def _defragment(self, name: str, a: Action, act: _Act) -> Action | None:
        runtime = self.h.engines[name].runtime
        if not (runtime.core.config.enable_sleep_mode and runtime.dev_mode):
            act.record.steps.append("no sleep mode or dev mode: relaunch instead")
            return self._relaunch(name, list(self.h.argv[name][0]), dict(self.h.argv[name][1]), act)
        min_freed = float(a.params.get("min_freed_ratio", 0.15))
        level = int(a.params.get("sleep_level", 1))

        def sleep_wake() -> None:
            core = runtime.core
            before = core.fb_used_bytes(self.h.now)
            runtime.sleep(level, self.h.now)
            freed = (before - core.fb_used_bytes(self.h.now)) / before if before else 0.0
            act.record.steps.append(f"/sleep?level={level} freed {freed:.0%} of the framebuffer")

            def wake() -> None:
                runtime.wake_up(self.h.now)
                self.h.kick(name)
                if freed < min_freed:
                    act.record.steps.append("memory did not come back: relaunch")
                    self._stop_start(name, list(self.h.argv[name][0]), dict(self.h.argv[name][1]), act,
                                     self._restore(name))
                    return
                self._resume(name, act)

            self.h.schedule(self.h.now + 1.0, wake)

        self._drain(name, sleep_wake, act)
        return None

    def _rewarm(self, name: str, variations: int) -> None:
        """Replay the templates seen in recent traffic to `name`: `variations` prompts per template."""
        groups: dict[int, RequestSpec] = {}
        for o in self.router.outcomes[-2000:]:
            if o.spec.prefix_group is not None and o.sent <= self.h.now:
                groups.setdefault(o.spec.prefix_group, o.spec)
        n = 0
        for g, spec in groups.items():
            for _ in range(variations):
                n += 1
                self.h.submit(name, replace(spec, index=-10_000_000 - 1000 * g - n, output_tokens=1),
                              at=self.h.now + n * 0.05)

    def describe(self, act: _Act, t0: float) -> dict[str, Any]:
        rec = act.record
        return {"id": rec.id, "t_s": act.decided - t0, "effective_s": None if act.effective is None
                else act.effective - t0, "action": rec.kind, "target": rec.target,
                "params": {k: v for k, v in rec.action["params"].items() if k not in ("argv", "env")},
                "playbook": rec.playbook, "engine": rec.engine, "trigger": rec.trigger, "status": rec.status,
                "reason": rec.reason, "verify": rec.verify, "before": rec.before, "after": rec.after,
                "steps": list(rec.steps)}


def _verify_spec(a: Action, f: Finding, within_s: float) -> VerifySpec:
    """What must improve: the queue for admission and capacity changes (the finding's latency evidence lags
    them by the backlog's drain time), else the finding's first evidence; by 10% or the finding clears."""
    if a.kind in VERIFY_QUEUE:
        return VerifySpec("waiting", "down", ratio=0.9, within_s=within_s)
    ev = f.evidence[0]
    up = ev.comparison.startswith("<")
    return VerifySpec(ev.signal, "up" if up else "down", ratio=1.1 if up else 0.9, within_s=within_s)


def _int(p: Any, key: str, lo: int) -> int:
    v = p.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise Refused(f"{key} must be an integer >= {lo}, got {v!r}")
    return v


# ----- one run ---------------------------------------------------------------------------------------------


@dataclass
class Evaluation:
    t_s: float
    findings: list[Finding]


@dataclass
class RunResult:
    """One run: every request's outcome, the doctor's evaluations and actions (times relative to t0)."""

    scenario: Scenario
    seed: int
    mode: str
    t0: float
    end_s: float
    outcomes: list[Outcome]
    evaluations: list[Evaluation]
    actions: list[dict[str, Any]] = field(default_factory=list)
    policy_changes: list[tuple[float, str]] = field(default_factory=list)
    probe: list[Outcome] = field(default_factory=list)  # the capacity probe's requests (none unless asked)
    probe_rates: tuple[float, float] = (0.0, 0.0)  # its arrival rate at the start and at the end, req/s


def run(scenario: Scenario, *, seed: int = 0, mode: str = "auto", duration_s: float | None = None,
        eval_every_s: float = 30.0, gpus: int = 4, cooldown_s: float = COOLDOWN_S,
        verify_s: float = VERIFY_S, probe: bool = False) -> RunResult:
    """Run `scenario` in virtual time with the doctor in `mode` (observe: reads and reports only; auto: acts);
    with `probe`, then measure the capacity the deployment was left with (see PROBE_S)."""
    if mode not in ("observe", "auto"):
        raise ValueError(f"mode must be observe or auto, got {mode!r}")
    if eval_every_s <= 0:
        raise ValueError(f"eval_every_s must be > 0, got {eval_every_s}")
    duration = scenario.duration_s if duration_s is None else duration_s
    if duration <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration}")
    sc = scenario.with_duration(duration)
    h = EfficacyHarness(seed=seed)
    for e in sc.engines:  # dev mode on, as the deployment runs it, so /sleep and /wake_up exist
        h.add_engine(e.name, sc.argv_for(e.name, seed), env={**e.env, "VLLM_SERVER_DEV_MODE": "1"})
        h.warm_up(e.name, at=h.start)
    h.run_until(h.start + WARMUP_S)
    t0 = h.now
    router = VirtualRouter(h, initial_policy([f"sim://{e.name}" for e in sc.engines if e.role == "hot"],
                                             [f"sim://{e.name}" for e in sc.engines if e.role == "cold"],
                                             route_threshold_tokens=sc.route_threshold))
    specs = list(sc.requests(seed))
    for spec in specs:
        router.submit(spec, t0 + spec.arrival_s)
    for incident in sc.timeline:
        if incident.kind in ("fault", "restart"):
            h.schedule(t0 + incident.at_s, functools.partial(h.apply, incident))
    observer = Observer(h, sc)
    settings = ScenarioSettings(sc.templates_on)
    history = MemoryHistory()
    state: MutableMapping[str, dict[str, Any]] = {}
    doctor = HarnessDoctor(h, router, gpus=gpus, cooldown_s=cooldown_s, verify_s=verify_s,
                           on_engine=functools.partial(_watch_engine, observer))
    evaluations: list[Evaluation] = []
    t_prev, k = t0, 1
    while k * eval_every_s <= duration + 1e-9:
        now = t0 + k * eval_every_s
        h.run_until(now)
        window = now - t_prev
        readings = observer.read(window)
        signals: dict[str, Signals] = {}
        for r in readings:
            signals[r.name] = build_signals(r, window_s=window, long_prompt_tokens=router.policy.route_threshold_tokens)
            if r.last_ok("metrics") is not None:
                history.append(r.name, now, signals[r.name].values)
        views = build_views(readings, signals, now=now, settings=settings,
                            history_for=functools.partial(_history_at, history, now), in_progress=doctor.busy)
        findings = run_playbooks(views, state, now=now, settings=settings)
        evaluations.append(Evaluation(now - t0, findings))
        if mode == "auto":
            doctor.cycle(now, findings, signals)
        t_prev, k = now, k + 1
    end = t0 + duration
    h.run_until(end)
    limit = end + DRAIN_LIMIT_S
    while h.now < limit and any(o.result == "unfinished" and o.rejected is None for o in router.outcomes
                                if o.sent < end):
        h.run_for(10.0)
    n_trace = len(router.outcomes)
    rates = _probe(h, router, specs, sc.onset_s or 0.0, duration, seed) if probe else (0.0, 0.0)
    return RunResult(sc, seed, mode, t0, duration, router.outcomes[:n_trace], evaluations,
                     [doctor.describe(a, t0) for a in doctor.log], [(t - t0, c) for t, c in router.changes],
                     router.outcomes[n_trace:], rates)


def _probe(h: EfficacyHarness, router: VirtualRouter, specs: Sequence[RequestSpec], onset_s: float,
           duration_s: float, seed: int) -> tuple[float, float]:
    """Send the capacity probe's ramp through `router` and run it out; returns its start and end rates."""
    mix = [s for s in specs if s.arrival_s >= onset_s] or list(specs)
    if not mix:
        return (0.0, 0.0)
    rate = len(mix) / max(duration_s - onset_s, 1.0)
    r0, r1 = PROBE_FROM * rate, PROBE_TO * rate
    start = h.now
    first_index = max(s.index for s in specs) + 1
    rng = random.Random(seed * 7919 + 17)
    for i, t in enumerate(ramp_arrivals(rng, r0, r1, PROBE_S)):
        spec = replace(mix[i % len(mix)], index=first_index + i, arrival_s=start - h.start + t)
        router.submit(spec, start + t)
    h.run_until(start + PROBE_S + PROBE_TAIL_S)
    return (r0, r1)


def ramp_arrivals(rng: random.Random, r0: float, r1: float, span_s: float) -> list[float]:
    """Poisson arrival times over [0, span_s) whose rate grows linearly from r0 to r1 (by inverting the
    cumulative rate r0*t + (r1-r0)*t^2/(2*span) at unit-exponential steps)."""
    a = (r1 - r0) / (2.0 * span_s)
    out: list[float] = []
    total = 0.0
    while True:
        total += rng.expovariate(1.0)
        t = (-r0 + math.sqrt(r0 * r0 + 4.0 * a * total)) / (2.0 * a) if a > 0 else total / r0
        if t >= span_s:
            return out
        out.append(t)


def _watch_engine(observer: Observer, name: str, role: str, argv: Sequence[str], env: dict[str, str],
                  fresh: bool) -> None:
    """The doctor's config follows a relaunch (new flags) or a new replica (a new engine to read)."""
    w = observer.watches.get(name)
    if w is None:
        w = observer.watches[name] = _Watch(name, role, _config_from_argv(argv, env))
        w.prev_metrics = observer._metrics(name)
    else:
        w.config = _config_from_argv(argv, env)
    if fresh:
        w.fb_baseline = None


# ----- the numbers ---------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _class_stats(outs: Sequence[Outcome]) -> dict[str, Any]:
    ok = [o for o in outs if o.result == "ok"]
    return {"sent": len(outs), "ok": len(ok), "rejected_413": sum(o.result == "rejected" for o in outs),
            "failed": sum(o.result == "failed" for o in outs),
            "unfinished": sum(o.result == "unfinished" for o in outs),
            "p99_e2e_s": percentile([o.e2e for o in ok if o.e2e is not None], 99),
            "p99_ttft_s": percentile([o.ttft for o in ok if o.ttft is not None], 99),
            "p50_e2e_s": percentile([o.e2e for o in ok if o.e2e is not None], 50),
            "goodput_share": (sum(o.good for o in outs) / len(outs)) if outs else None}


def _windows_ttft(run: RunResult, start_s: float) -> list[tuple[float, float | None]]:
    """(window start, P99 TTFT) of requests sent in each WINDOW_S window from start_s; 413s are left out,
    failed or unfinished requests count as infinitely slow; None for a window with no request."""
    out = []
    t = start_s
    while t < run.end_s - 1e-9:
        outs = [o for o in run.outcomes if t <= o.sent - run.t0 < t + WINDOW_S and o.result != "rejected"]
        vals = [o.ttft if o.result == "ok" and o.ttft is not None else math.inf for o in outs]
        out.append((t, percentile(vals, 99)))
        t += WINDOW_S
    return out


def measure(run: RunResult, *, onset_s: float | None = None) -> dict[str, Any]:
    """The comparison's numbers over the incident window: requests sent from the onset to the end of the trace."""
    onset = run.scenario.onset_s if onset_s is None else onset_s
    onset = 0.0 if onset is None else onset
    span = max(run.end_s - onset, 1e-9)
    sent = [o for o in run.outcomes if o.sent - run.t0 >= onset]
    ok_done = [o for o in run.outcomes if o.result == "ok" and o.record is not None and o.record.finished is not None
               and onset <= o.record.finished - run.t0 < run.end_s]
    classes = {"all": _class_stats(sent), "short": _class_stats([o for o in sent if o.cls == "short"]),
               "long": _class_stats([o for o in sent if o.cls == "long"])}
    t_fin = sorted(o.record.finished - run.t0 for o in ok_done if o.record is not None and o.record.finished)
    t_arr = sorted(o.sent - run.t0 for o in sent)
    t_good = sorted(o.record.finished - run.t0 for o in ok_done if o.good and o.record is not None
                    and o.record.finished)
    detect = next((e.t_s for e in run.evaluations if e.t_s >= onset
                   and any(f.severity != "info" for f in e.findings)), None)
    fixed = [a["effective_s"] for a in run.actions if a["effective_s"] is not None and a["effective_s"] >= onset]
    wins = _windows_ttft(run, math.floor(onset / WINDOW_S) * WINDOW_S)
    breach = next((i for i, (_, p) in enumerate(wins) if p is not None and p > TTFT_SLO_S), None)
    recover: float | str | None = "no breach"
    if breach is not None:
        recover = "not recovered"
        for i in range(breach + 1, len(wins) - 1):
            if all(p is None or p <= TTFT_SLO_S for _, p in wins[i:i + 2]):
                recover = max(0.0, wins[i][0] - onset)
                break
    return {
        "window_s": [onset, run.end_s], "classes": classes,
        "throughput_rps": len(ok_done) / span,
        "output_tokens_per_s": sum(o.record.tokens for o in ok_done if o.record is not None) / span,
        "goodput_rps": sum(o.good for o in sent) / span,
        "peak_qps_served": _peak(t_fin, onset, run.end_s), "peak_qps_offered": _peak(t_arr, onset, run.end_s),
        "peak_goodput_qps": _peak(t_good, onset, run.end_s),
        "capacity_qps": _capacity(run),
        "time_to_detect_s": None if detect is None else detect - onset,
        "time_to_fix_s": (min(fixed) - onset) if fixed else None,
        "time_to_recover_s": recover,
    }


def _capacity(run: RunResult) -> float | None:
    """The capacity probe's peak QPS within SLO; None when the run had no probe."""
    if not run.probe:
        return None
    times = sorted(o.record.finished for o in run.probe if o.good and o.record is not None and o.record.finished)
    return _peak(times, -math.inf, math.inf)


def _peak(times: Sequence[float], start: float, end: float) -> float:
    """The most events in any PEAK_WINDOW_S window (sliding over event times) within [start, end), per second."""
    xs = [t for t in times if start <= t < end]
    best, j = 0, 0
    for i, t in enumerate(xs):
        while xs[j] < t - PEAK_WINDOW_S + 1e-9:
            j += 1
        best = max(best, i - j + 1)
    return best / PEAK_WINDOW_S


@dataclass
class Pair:
    baseline: RunResult
    doctor: RunResult

    def metrics(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return measure(self.baseline), measure(self.doctor)


def run_pair(scenario: Scenario, *, seed: int = 0, duration_s: float | None = None, **kw: Any) -> Pair:
    """The same trace and seed without the doctor acting (observe) and with it in auto mode."""
    return Pair(run(scenario, seed=seed, mode="observe", duration_s=duration_s, **kw),
                run(scenario, seed=seed, mode="auto", duration_s=duration_s, **kw))


def without(policy: Policy, name: str) -> Policy:
    """`policy` with the upstream `name` removed."""
    ups = policy.upstreams.items()
    return replace(policy, upstreams={r: tuple(u for u in specs if u.name != name) for r, specs in ups})
