"""Engine actions in an efficacy run, as doctor's local launcher and vLLM admin actuators take them: relaunch
(blue/green on spare GPUs, else drain, stop, start, warm up, resume), replicas, tensor-parallel scale-out,
defragmentation by /sleep + /wake_up with the freed memory checked, prefix-cache re-warm."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from doctor.remedy.model import Refused
from playbooks.model import Action
from router.policy import UpstreamSpec, with_upstream_state
from sim.engine import EngineStartError
from sim.workload import RequestSpec
from trials.efficacy.attempt import Attempt
from trials.efficacy.harness import EfficacyHarness
from trials.efficacy.vrouter import VirtualRouter, engine_url, without
from trials.scenario import WARMUP_S

DRAIN_TIMEOUT_S = 300.0  # a drain waits this long for in-flight requests, else the change is abandoned
SETTLE_S = 5.0  # after the last warm-up group is sent, before the router resumes the engine
_FLAGS = {"max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
          "gpu_memory_utilization": "--gpu-memory-utilization", "max_model_len": "--max-model-len",
          "tensor_parallel_size": "--tensor-parallel-size", "api_server_count": "--api-server-count"}
EngineHook = Callable[[str, str | None, Sequence[str], dict[str, str], bool], None]


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


class EngineOps:
    """The engine-side actuators of HarnessDoctor (its state: the harness, the router, GPUs owned, engines busy)."""

    h: EfficacyHarness
    router: VirtualRouter
    gpus: int
    on_engine: EngineHook
    owned: dict[str, tuple[int, ...]]
    renamed: dict[str, str]  # engine -> the engine a blue/green relaunch replaced it with
    _busy: dict[str, int]

    def busy(self, name: str) -> bool:
        return self._busy.get(name, 0) > 0

    def free_gpus(self) -> list[int]:
        used = {g for gs in self.owned.values() for g in gs}
        return [g for g in range(self.gpus) if g not in used]

    def _done(self, act: Attempt, error: str | None = None) -> None:
        act.record.updated_at = self.h.now
        if error is not None:
            act.record.status, act.record.reason = "failed", error
        else:
            act.effective = self.h.now
        act.record.steps.append(f"t={self.h.now - self.h.start - WARMUP_S:.0f}s " + (error or "in effect"))


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

    def _relaunch(self, name: str, argv: list[str], env: dict[str, str], act: Attempt) -> Action:
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

    def _blue_green(self, name: str, argv: list[str], env: dict[str, str], act: Attempt,
                    gpus: tuple[int, ...]) -> Action:
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
                engine = self.h.add_engine(new, argv, env=env, starting=True)
            except EngineStartError as exc:  # the old engine never stopped serving: nothing to undo
                self.owned.pop(new, None)
                self._busy[name] -= 1
                self._done(act, f"start failed ({str(exc).splitlines()[0]}); {name} kept serving")
                return
            self.h.schedule(engine.core.ready_at, ready)

        def ready() -> None:  # /health answers: the launcher records the engine and warms it up
            self.on_engine(new, role, argv, env, True)
            t_last = self.h.warm_up(new, at=self.h.now)
            self.h.schedule(t_last + SETTLE_S, swap)

        def swap() -> None:
            pol = self.router.policy
            ups = (*pol.upstreams.get(role, ()), UpstreamSpec(new, engine_url(new), "active", spec.max_in_flight))
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

        start()  # the new process pays its modelled start-up (core.startup) before it serves
        return Action("relaunch", new, {"argv": list(old_argv), "env": dict(old_env)})

    def _scale_tp(self, name: str, tp: Any, act: Attempt) -> Action:
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

    def _drain(self, name: str, then: Callable[[], None], act: Attempt,
               timeout_s: float | None = DRAIN_TIMEOUT_S) -> None:
        """Stop routing new requests to `name`, wait for its in-flight ones, then `then()`. When they are not done
        within `timeout_s` the change is abandoned and the engine resumed: a drain never drops requests."""
        self._busy[name] = self._busy.get(name, 0) + 1
        if self.router.upstream(name) is not None:
            self.router.set_policy(with_upstream_state(self.router.policy, name, "draining"))
        act.record.steps.append(f"drain {name}")
        t0 = self.h.now

        def wait() -> None:
            left = self.router.in_flight(name)
            if left == 0:
                then()
            elif timeout_s is not None and self.h.now - t0 >= timeout_s:
                self._resume(name, act, f"drain of {name} did not finish within {timeout_s:g}s ({left} requests "
                                        "still in flight): change abandoned, engine resumed")
            else:
                self.h.schedule(self.h.now + 1.0, wait)

        wait()

    def _resume(self, name: str, act: Attempt, error: str | None = None) -> None:
        self.router.down.discard(name)
        if self.router.upstream(name) is not None:
            self.router.set_policy(with_upstream_state(self.router.policy, name, "active"))
        self._busy[name] -= 1
        self._done(act, error)

    def _stop_start(self, name: str, argv: list[str], env: dict[str, str], act: Attempt, inverse: Action) -> None:
        old = self.h.engines[name]
        self.router.down.add(name)
        old.core.kill(self.h.now, "stopped by the doctor for a relaunch")
        old.core.release_gpus()
        act.record.steps.append(f"stop {name}; start {' '.join(argv[1:])}")

        def start() -> None:
            try:
                engine = self.h.add_engine(name, argv, env=env, starting=True)
            except EngineStartError as exc:  # put the previous engine back (it pays its start-up too)
                first = str(exc).splitlines()[0]
                prev = inverse.params
                self.owned[name] = tuple(prev["gpus"])
                back = self.h.add_engine(name, list(prev["argv"]), env=dict(prev["env"]), starting=True)

                def restored() -> None:
                    self.on_engine(name, old_role, prev["argv"], dict(prev["env"]), True)
                    self._resume(name, act, f"start failed ({first}); previous engine restarted")

                self.h.schedule(back.core.ready_at, restored)
                return
            self.h.schedule(engine.core.ready_at, ready)

        def ready() -> None:  # /health answers: record the engine, warm it up, then resume
            self.on_engine(name, old_role, argv, env, True)
            t_last = self.h.warm_up(name, at=self.h.now)
            self.h.schedule(t_last + SETTLE_S, lambda: self._resume(name, act))

        found = self.router.upstream(name)
        old_role = found[0] if found else None
        start()  # the new process pays its modelled start-up (core.startup) before it serves

    def _add_replica(self, name: str, act: Attempt) -> Action:
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
                engine = self.h.add_engine(new, list(argv), env=env, starting=True)
            except EngineStartError as exc:
                self.owned.pop(new, None)
                self._busy[name] -= 1
                self._done(act, f"replica start failed ({str(exc).splitlines()[0]})")
                return
            self.h.schedule(engine.core.ready_at, ready)

        def ready() -> None:
            self.on_engine(new, role, argv, env, True)
            t_last = self.h.warm_up(new, at=self.h.now)
            self.h.schedule(t_last + SETTLE_S, join)

        def join() -> None:
            pol = self.router.policy
            ups = (*pol.upstreams.get(role, ()), UpstreamSpec(new, engine_url(new), "active", spec.max_in_flight))
            self.router.set_policy(replace(pol, upstreams={**pol.upstreams, role: ups}))
            self._busy[name] -= 1
            self._done(act)

        start()
        return Action("scale_out", name, {"remove_replica": new})

    def _remove(self, new: str, act: Attempt) -> None:
        def stop() -> None:
            self.h.engines[new].core.kill(self.h.now, "replica removed by the doctor")
            self.h.engines[new].core.release_gpus()
            self.router.set_policy(without(self.router.policy, new))
            self.owned.pop(new, None)
            self.on_engine(new, None, (), {}, True)
            self._busy[new] -= 1
            self._done(act)

        self._drain(new, stop, act, timeout_s=None)

    def _defragment(self, name: str, a: Action, act: Attempt) -> Action | None:
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

