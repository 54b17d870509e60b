"""The doctor in auto mode: harness actuators that act as the real ones do, behind simplified guardrails."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from collectors.types import Signals
from doctor.accuracy import WARMUP_S
from doctor.efficacy.harness import EfficacyHarness
from doctor.efficacy.vrouter import VirtualRouter, without
from doctor.remedy.model import ActionRecord, Refused, VerifySpec
from doctor.remedy.planner import verify_spec
from playbooks.model import Action, Finding
from router.policy import PolicyError, UpstreamSpec, check_limits, with_upstream_state
from sim.engine import EngineStartError
from sim.workload import RequestSpec

COOLDOWN_S = 600.0  # per action kind + target
VERIFY_S = 120.0  # after an action is in effect, what it should improve must have improved
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
        self.renamed: dict[str, str] = {}  # engine -> the engine a blue/green relaunch replaced it with

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
            engine = self.current(act.finding.engine)  # after a blue/green swap: the engine that replaced it
            still = any(f.playbook == act.finding.playbook and f.engine == engine for f in findings)
            sig = signals.get(engine)
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
        """Blue/green when the engine is behind the router and enough GPUs are free (as the local launcher does),
        else drain, stop, start, warm up, resume."""
        need = len(self.owned[name])
        free = self.free_gpus()
        if self.router.upstream(name) is not None and need and len(free) >= need:
            return self._blue_green(name, argv, env, act, tuple(free[:need]))
        inverse = self._restore(name)
        self._drain(name, lambda: self._stop_start(name, argv, env, act, inverse), act)
        return inverse

    def current(self, name: str) -> str:
        """The engine that now stands for `name` (a blue/green swap replaces an engine by a new one)."""
        while name in self.renamed:
            name = self.renamed[name]
        return name

    def _blue_green(self, name: str, argv: list[str], env: dict[str, str], act: _Act, gpus: tuple[int, ...]) -> Action:
        """Start the new engine on spare GPUs, warm it up, put it in the pool, then drain and stop the old one."""
        found = self.router.upstream(name)
        assert found is not None
        role, spec = found
        old_argv, old_env = self.h.argv[name]
        k = 2
        while f"{name}-b{k}" in self.h.engines or f"{name}-b{k}" in self.owned:
            k += 1
        new = f"{name}-b{k}"
        self.owned[new] = gpus
        env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        self._busy[name] = self._busy.get(name, 0) + 1
        act.record.steps.append(f"blue/green: start {new} on GPU {env['CUDA_VISIBLE_DEVICES']} with "
                                f"{' '.join(argv[1:])}")

        def start() -> None:
            try:
                self.h.add_engine(new, argv, env=env)
            except EngineStartError as exc:  # the old engine never stopped serving: nothing to undo
                self.owned.pop(new, None)
                self._busy[name] -= 1
                self._done(act, f"start failed ({str(exc).splitlines()[0]}); {name} kept serving")
                return
            self.on_engine(new, role, argv, env, True)
            t_last = self.h.warm_up(new, at=self.h.now)
            self.h.schedule(t_last + SETTLE_S, swap)

        def swap() -> None:
            pol = self.router.policy
            ups = (*pol.upstreams.get(role, ()), UpstreamSpec(new, f"sim://{new}", "active", spec.max_in_flight))
            self.router.set_policy(replace(pol, upstreams={**pol.upstreams, role: ups}))
            self.renamed[name] = new
            self._done(act)  # in effect: the new engine serves
            act.record.steps.append(f"swap: {new} in, {name} draining")
            self._drain(name, stop_old, act, timeout_s=None)

        def stop_old() -> None:
            self.h.engines[name].core.kill(self.h.now, "replaced by a blue/green relaunch")
            self.h.engines[name].core.release_gpus()
            self.router.set_policy(without(self.router.policy, name))
            self.owned.pop(name, None)
            self.on_engine(name, None, (), {}, True)
            self._busy[name] -= 2  # this change and its drain
            act.record.steps.append(f"stop {name}")

        self.h.schedule(self.h.now + self.h.engines[name].core.preset.startup_s, start)
        return Action("relaunch", new, {"argv": list(old_argv), "env": dict(old_env)})

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
    """Where doctor.remedy.planner.VERIFY has nothing for the action, what must improve: the queue for admission
    and capacity changes (the finding's latency evidence lags them by the backlog's drain time), else the finding's
    first evidence; by 10% or the finding clears."""
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
