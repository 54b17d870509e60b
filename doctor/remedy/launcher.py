"""The engine launcher: relaunch with changed arguments (blue/green on spare GPUs, else in place), scale out and in.

`Launcher` is the backend interface (local processes here; systemd or Kubernetes can implement it).
`LocalLauncher` fills the engine's command template (doctor.config EngineConfig.launch_command) and runs it
through doctor.remedy.engine_procs (detached, recorded under STATE_DIR/engines/, adopted by a later run, so a
cron run leaves nothing orphaned).
A start that fails, or an engine that never answers /health, is rolled back: the old engine stays or
comes back in service, and the ActuatorError carries the tail of the new engine's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import string
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from doctor.config import EngineConfig
from doctor.remedy.engine_procs import (
    SECRET_ENV,
    START_MARK,
    EngineProcesses,
    Process,
    ProcessTable,
    Spawner,
    free_port,
    popen_spawn,
    redact,
)
from doctor.remedy.model import (
    ActuatorContext,
    ActuatorError,
    Applied,
    EngineTarget,
    LaunchedEngine,
    Launcher,
    Refused,
)
from doctor.remedy.router_actuator import RouterActuator
from doctor.remedy.vllm_admin import warm_up
from playbooks.action_kinds import kinds
from playbooks.model import Action

__all__ = ["CONTROL_KEYS", "LAUNCHER_KINDS", "LOWER_FACTOR", "SECRET_ENV", "START_MARK", "EngineProcesses",
           "FreeMemory", "LaunchedEngine", "Launcher", "LocalLauncher", "Process", "Spawner", "free_port",
           "popen_spawn", "redact"]

LAUNCHER_KINDS: tuple[str, ...] = kinds(actuator="launcher")
CONTROL_KEYS = frozenset({"reason", "restore", "fallback"})  # action params that are not vLLM arguments
LOWER_FACTOR = 0.75  # "lower" in a playbook's params: 75% of the current value
FreeMemory = Callable[[int], "tuple[float, float] | None"]  # GPU index -> (free bytes, total bytes) or unknown
ClientFactory = Callable[[float], httpx.AsyncClient]  # timeout in seconds -> a client (the network by default)


def _network_client(timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout_s)


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}"))


def _flag(key: str, value: Any) -> str:
    """One vLLM flag for the shell line, name and value quoted (never a shell word from outside input)."""
    name = shlex.quote("--" + key.replace("_", "-"))
    if value is True:
        return name
    if value is False:
        return shlex.quote("--no-" + key.replace("_", "-"))
    return f"{name} {shlex.quote(str(value))}"


class LocalLauncher:
    """Engines as local processes. Implements Launcher and the Actuator protocol (relaunch, scale_out, scale_in)."""

    kinds: tuple[str, ...] = LAUNCHER_KINDS

    def __init__(self, state_dir: Path, *, spawn: Spawner = popen_spawn, router: RouterActuator | None = None,
                 gpu_pool: Sequence[int] | None = None, free_memory: FreeMemory | None = None,
                 env: Mapping[str, str] | None = None, secret_env: Sequence[str] = SECRET_ENV,
                 health_timeout_s: float = 120.0, stop_grace_s: float = 15.0,
                 drain_timeout_s: float = 120.0, retire_timeout_s: float = 600.0,
                 warm_batches: Sequence[int] = (4, 8, 16),
                 warm_prompt_tokens: Sequence[int] = (512, 1024, 2048),
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, procs: ProcessTable | None = None,
                 client_factory: ClientFactory = _network_client,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """I/O passed in: `procs` (default: processes on this machine, recorded under STATE_DIR/engines/), the
        HTTP client for /health, /load and warm-ups, the clock of its deadlines and the wait between polls."""
        self.procs: ProcessTable = procs if procs is not None else EngineProcesses(
            Path(state_dir) / "engines", spawn=spawn, env=env, secret_env=secret_env, stop_grace_s=stop_grace_s,
            sleep=sleep)
        self.client_factory = client_factory
        self.clock = clock
        self.router = router
        self.gpu_pool = None if gpu_pool is None else tuple(gpu_pool)
        self.free_memory = free_memory
        self.health_timeout_s = health_timeout_s
        self.drain_timeout_s = drain_timeout_s
        # An engine already out of rotation (the old one of a blue/green swap, a removed replica) finishes what it
        # has before it is stopped, up to this long: waiting costs its GPU for a while, stopping it fails requests
        # (measured in the efficacy trial: 93 requests of a KV-bound engine still running 120 s after the swap).
        self.retire_timeout_s = retire_timeout_s
        self.warm_batches, self.warm_prompt_tokens = tuple(warm_batches), tuple(warm_prompt_tokens)
        self.sleep = sleep

    # ----- processes (EngineProcesses) -------------------------------------------------------------

    def adopt(self) -> list[LaunchedEngine]:
        """Engines started earlier (pid files): alive ones are returned, dead ones' files removed."""
        return self.procs.adopt()

    def record_for(self, name: str) -> LaunchedEngine | None:
        """The live engine process named `name` (the newest when several)."""
        return self.procs.record_for(name)

    def start(self, target: EngineTarget, *, port: int, gpus: Sequence[int], args: Mapping[str, Any]) -> LaunchedEngine:
        """Start `target` with its command template filled in for `port`, `gpus` and `args`."""
        merged = {**target.args, **args}
        line = self.command(target, port=port, gpus=gpus, args=merged)
        return self.procs.start(target.name, line, url=_with_port(target.url, port), port=port, gpus=gpus,
                                args=merged, role=target.role)

    async def stop(self, rec: LaunchedEngine) -> None:
        """SIGTERM to the engine's process group, SIGKILL after the grace period; its records removed."""
        await self.procs.stop(rec)

    # ----- GPUs ----------------------------------------------------------------------------------

    def free_gpu_count(self, ctx: ActuatorContext) -> int | None:
        """How many GPUs a new engine could start on now; None when no pool is known (never assumed)."""
        pool = self.gpu_pool if self.gpu_pool is not None else tuple(ctx.bounds.get("gpu_pool", ()) or ())
        return len(self.spare_gpus(ctx)) if pool else None

    def spare_gpus(self, ctx: ActuatorContext, bytes_ratio: float = 0.9) -> list[int]:
        """GPUs in the pool that no engine uses and (when a reading exists) have `bytes_ratio` of memory free."""
        pool = self.gpu_pool if self.gpu_pool is not None else tuple(ctx.bounds.get("gpu_pool", ()) or ())
        used = {g for e in ctx.engines.values() for g in e.gpus} | {g for r in self.adopt() for g in r.gpus}
        out = []
        for gpu in pool:
            if gpu in used:
                continue
            reading = self.free_memory(gpu) if self.free_memory is not None else None
            if reading is not None and reading[1] > 0 and reading[0] / reading[1] < bytes_ratio:
                continue
            out.append(gpu)
        return out

    # ----- commands ------------------------------------------------------------------------------

    def command(self, target: EngineTarget, *, port: int, gpus: Sequence[int], args: Mapping[str, Any]) -> str:
        """The engine's command template filled in; arguments without a placeholder are appended as flags."""
        if not target.launcher:
            raise Refused(f"engine {target.name!r} has no launcher command in the config")
        cfg = EngineConfig(name=target.name, url=_with_port(target.url, port), role=target.role,  # type: ignore[arg-type]
                           gpus=tuple(gpus), launcher=target.launcher, max_num_seqs=args.get("max_num_seqs"),
                           max_num_batched_tokens=args.get("max_num_batched_tokens"),
                           max_model_len=args.get("max_model_len"),
                           tensor_parallel_size=args.get("tensor_parallel_size"),
                           gpu_memory_utilization=args.get("gpu_memory_utilization"))
        placeholders = {f for _, f, _, _ in string.Formatter().parse(target.launcher) if f}
        line = cfg.launch_command(self.procs.dir.parent)
        extra = [_flag(k, v) for k, v in args.items() if k not in placeholders and k not in CONTROL_KEYS
                 and v is not None]
        return " ".join([line, *extra])

    def resolve(self, target: EngineTarget, changes: Mapping[str, Any]) -> dict[str, Any]:
        """The vLLM arguments to change: control keys dropped, "lower" resolved; Refused when it cannot be."""
        out: dict[str, Any] = {}
        for key, value in changes.items():
            if key in CONTROL_KEYS:
                continue
            if key in ("add_replicas", "replicas", "remove_replica", "remove_replicas"):
                continue
            if value == "lower":
                current = target.args.get(key)
                if not isinstance(current, int | float) or isinstance(current, bool):
                    raise Refused(f"{key}='lower' but the current {key} of {target.name} is unknown; set it in "
                                  "the config")
                value = max(1, int(current * LOWER_FACTOR)) if isinstance(current, int) else current * LOWER_FACTOR
            if isinstance(value, str) and any(c in value for c in ";&|`$\n"):
                raise Refused(f"{key}: {value!r} is not a plain value")
            out[key] = value
        return out

    # ----- health, drain, warm-up -----------------------------------------------------------------

    async def wait_healthy(self, rec: LaunchedEngine) -> None:
        """Until /health answers 200; ActuatorError (with the log's tail) when it exits or times out."""
        deadline = self.clock() + self.health_timeout_s
        async with self.client_factory(2.0) as client:
            while True:
                if not self.procs.alive(rec):
                    code = self.procs.exit_code(rec)
                    raise ActuatorError(f"{rec.name}: the new engine exited (code {code}) before becoming healthy; "
                                        f"command: {redact(rec.command)}\nlog tail:\n{self.procs.log_tail(rec)}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(rec.url + "/health")).status_code == 200:
                        return
                if self.clock() > deadline:
                    raise ActuatorError(f"{rec.name}: the new engine never became healthy within "
                                        f"{self.health_timeout_s:g}s; command: {redact(rec.command)}\n"
                                        f"log tail:\n{self.procs.log_tail(rec)}")
                await self.sleep(0.1)

    async def _engine_idle(self, url: str, timeout_s: float | None = None) -> bool:
        """Wait (bounded: `timeout_s`, default the drain timeout) until the engine's /load is 0 twice in a row (or
        it does not answer)."""
        deadline = self.clock() + (self.drain_timeout_s if timeout_s is None else timeout_s)
        quiet = 0
        async with self.client_factory(2.0) as client:
            while quiet < 2:
                try:
                    r = await client.get(url + "/load")
                    busy = r.status_code == 200 and int(r.json().get("server_load", 0)) > 0
                except (httpx.HTTPError, ValueError):
                    busy = False
                quiet = 0 if busy else quiet + 1
                if self.clock() > deadline:
                    return False
                await self.sleep(0.1)
        return True

    async def _warm(self, rec: LaunchedEngine, target: EngineTarget) -> list[str]:
        async with self.client_factory(300.0) as client:
            return await warm_up(rec.url, client, batches=self.warm_batches, prompt_tokens=self.warm_prompt_tokens,
                                 max_model_len=rec.args.get("max_model_len") or target.max_model_len, clock=self.clock)

    async def _bring_up(self, target: EngineTarget, *, port: int, gpus: Sequence[int],
                        args: Mapping[str, Any]) -> tuple[LaunchedEngine, list[str]]:
        rec = self.start(target, port=port, gpus=gpus, args=args)
        try:
            await self.wait_healthy(rec)
            return rec, await self._warm(rec, target)
        except BaseException:
            await self.stop(rec)
            raise

    async def _routed(self, ctx: ActuatorContext, name: str) -> str | None:
        """The upstream's role when the router is configured and knows `name`, else None."""
        if self.router is None or not ctx.router_url:
            return None
        try:
            role, _ = await self.router.upstream(ctx, name)
        except Refused:
            return None
        return role

    async def _old_process(self, target: EngineTarget) -> LaunchedEngine | None:
        rec = self.record_for(target.name)
        if rec is None:
            with contextlib.suppress(httpx.HTTPError):
                async with self.client_factory(2.0) as client:
                    if (await client.get(target.url.rstrip("/") + "/health")).status_code == 200:
                        raise Refused(f"{target.name} at {target.url} is running but was not started by the doctor's "
                                      f"launcher (no pid file under {self.procs.dir}); it cannot be stopped safely")
        return rec

    # ----- relaunch ------------------------------------------------------------------------------

    def _tp(self, target: EngineTarget, args: Mapping[str, Any]) -> int:
        return int(args.get("tensor_parallel_size") or target.args.get("tensor_parallel_size") or 1)

    def _inverse(self, target: EngineTarget, args: Mapping[str, Any]) -> Action:
        return Action("relaunch", target.name, {**{k: target.args.get(k) for k in args}, "restore": True},
                      risk="medium", description="relaunch with the previous arguments")

    def _adopt_into(self, target: EngineTarget, rec: LaunchedEngine) -> dict[str, Any]:
        """Point the target at the new process (later actions in this run see it) and say what changed."""
        target.url, target.gpus = rec.url, rec.gpus
        target.args.clear()
        target.args.update({k: v for k, v in rec.args.items() if v is not None})
        return {"url": rec.url, "port": rec.port, "gpus": list(rec.gpus), "pid": rec.pid,
                "args": dict(target.args), "log": rec.log}

    async def relaunch(self, target: EngineTarget, ctx: ActuatorContext, changes: Mapping[str, Any],
                       *, gpus: Sequence[int] | None = None) -> Applied:
        """Blue/green when the router knows the engine and spare GPUs exist, else drain-stop-start in place."""
        args = self.resolve(target, changes)
        tp = self._tp(target, args)
        role = await self._routed(ctx, target.name)
        old = await self._old_process(target)
        spare = self.spare_gpus(ctx)
        if role is not None and gpus is None and len(spare) >= tp:
            return await self._blue_green(target, ctx, args, old, spare[:tp])
        if gpus is None:
            own = list(target.gpus)
            gpus = own[:tp] if len(own) >= tp else own + spare[:tp - len(own)]
            if len(gpus) < tp:
                raise Refused(f"{target.name}: tensor_parallel_size {tp} needs {tp} GPUs; it has {len(own)} and "
                              f"{len(spare)} spare ({spare})")
        return await self._in_place(target, ctx, args, old, list(gpus), role)

    async def _blue_green(self, target: EngineTarget, ctx: ActuatorContext, args: dict[str, Any],
                          old: LaunchedEngine | None, gpus: list[int]) -> Applied:
        assert self.router is not None
        host = urlsplit(target.url).hostname or "127.0.0.1"
        port = self.procs.free_port(host)
        steps = [f"blue/green: starting {target.name} on port {port}, GPUs {gpus} with {args}"]
        try:
            rec, warm = await self._bring_up(target, port=port, gpus=gpus, args=args)
        except ActuatorError as exc:
            raise ActuatorError(f"{exc}\nrolled back: the old engine stayed in service") from None
        steps += [f"healthy at {rec.url} (pid {rec.pid})", *warm]
        try:
            await self.router.swap_upstream(ctx, target.name, target.name, rec.url)
        except (ActuatorError, Refused) as exc:
            await self.stop(rec)
            raise ActuatorError(f"{target.name}: swapping the new engine in at the router failed ({exc}); the new "
                                "engine was stopped and the old one stayed in service") from None
        steps.append(f"router: {target.name} now {rec.url} (was {target.url})")
        if not await self._engine_idle(target.url.rstrip("/"), self.retire_timeout_s):
            steps.append(f"the old engine still had requests after {self.retire_timeout_s:g}s; stopping it anyway")
        if old is not None:
            await self.stop(old)
            steps.append(f"stopped the old engine (pid {old.pid})")
        inverse = self._inverse(target, args)
        return Applied(inverse, tuple(steps), self._adopt_into(target, rec))

    async def _in_place(self, target: EngineTarget, ctx: ActuatorContext, args: dict[str, Any],
                        old: LaunchedEngine | None, gpus: list[int], role: str | None) -> Applied:
        port = urlsplit(target.url).port or 8000
        steps: list[str] = []
        prev_state: str | None = None
        if role is not None:
            assert self.router is not None
            prev_state = await self.router.drain(ctx, target.name)
            steps.append(f"router: {target.name} draining (the router fails over to the other role where prompts fit)")
        try:
            if old is not None:
                if not await self._engine_idle(target.url.rstrip("/")):
                    raise ActuatorError(f"{target.name} still had requests in flight after {self.drain_timeout_s:g}s "
                                        "of draining; nothing was restarted")
                await self.stop(old)
                steps.append(f"stopped {target.name} (pid {old.pid})")
            else:
                steps.append(f"{target.name} was not running; starting it")
            try:
                rec, warm = await self._bring_up(target, port=port, gpus=gpus, args=args)
            except ActuatorError as exc:
                raise ActuatorError(f"{exc}\n{await self._restore(target, old)}") from None
            steps += [f"started {target.name} (pid {rec.pid}) on GPUs {gpus} with {args}", *warm]
        finally:
            if prev_state is not None:
                assert self.router is not None
                await self.router.resume(ctx, target.name, prev_state)
                steps.append(f"router: {target.name} {prev_state}")
        return Applied(self._inverse(target, args), tuple(steps), self._adopt_into(target, rec))

    async def _restore(self, target: EngineTarget, old: LaunchedEngine | None) -> str:
        """After a failed in-place start: the old engine back as it was."""
        if old is None:
            return "rolled back: nothing to restore (the engine was not running before)"
        rec = old
        try:
            rec = self.procs.restart(old)
            await self.wait_healthy(rec)
            await self._warm(rec, target)
        except (ActuatorError, OSError) as exc:
            return f"rollback FAILED: the old engine did not come back ({str(exc).splitlines()[0]})"
        return f"rolled back: the old engine is back in service (pid {rec.pid})"

    # ----- scale out -----------------------------------------------------------------------------

    async def add_replicas(self, target: EngineTarget, ctx: ActuatorContext, count: int = 1) -> Applied:
        """`count` replicas of `target` behind the router, started together (their start-ups overlap), each
        added to the router once healthy and warm; one that fails to come up is stopped and said so. The
        inverse removes the ones added."""
        role = await self._routed(ctx, target.name)
        if role is None or self.router is None:
            raise Refused(f"{target.name}: a replica is added behind the router, and the router does not know it")
        tp = self._tp(target, {})
        spare = self.spare_gpus(ctx)
        if len(spare) < tp * count:
            raise Refused(f"{target.name}: {count} replica(s) need {tp * count} free GPU(s); spare: {spare or 'none'}")
        taken = {r.name for r in self.adopt()} | set(ctx.engines)
        host = urlsplit(target.url).hostname or "127.0.0.1"
        started: list[tuple[EngineTarget, LaunchedEngine]] = []
        for k in range(count):
            name = next(f"{target.name}-r{i}" for i in range(2, 10_000) if f"{target.name}-r{i}" not in taken)
            taken.add(name)
            replica = replace(target, name=name, url=_with_port(target.url, self.procs.free_port(host)), gpus=(),
                              args=dict(target.args))
            gpus = spare[k * tp:(k + 1) * tp]
            started.append((replica, self.start(replica, port=urlsplit(replica.url).port or 0, gpus=gpus, args={})))
        steps: list[str] = []
        added: list[tuple[str, LaunchedEngine]] = []
        failed: list[str] = []
        for replica, rec in started:
            try:
                await self.wait_healthy(rec)
                warm = await self._warm(rec, replica)
                await self.router.add_upstream(ctx, role, replica.name, rec.url)
            except (ActuatorError, Refused) as exc:
                await self.stop(rec)
                failed.append(f"{replica.name} did not come up and was stopped: {str(exc).splitlines()[0]}")
                continue
            except BaseException:
                for _, other in started:  # cancelled or crashed mid-way: nothing left running unrouted
                    await self.stop(other)
                raise
            added.append((replica.name, rec))
            steps += [f"replica {replica.name} at {rec.url} on GPUs {list(rec.gpus)} (pid {rec.pid})", *warm,
                      f"router: added {replica.name} to {role}"]
        if not added:
            raise ActuatorError(f"{target.name}: no replica came up; " + "; ".join(failed))
        names = [n for n, _ in added]
        details: dict[str, Any] = {"replicas": names, "urls": [r.url for _, r in added],
                                   "gpus": [list(r.gpus) for _, r in added]}
        if len(added) == 1:
            details.update(replica=names[0], url=added[0][1].url, gpus=list(added[0][1].gpus))
        return Applied(Action("scale_out", target.name, {"remove_replicas": names, "restore": True}, risk="medium"),
                       (*steps, *failed), details)

    async def remove_replica(self, ctx: ActuatorContext, name: str) -> Applied:
        """Out of the router (in-flight requests finish, up to the retire timeout), then stopped."""
        rec = self.record_for(name)
        steps = []
        if self.router is not None and await self._routed(ctx, name) is not None:
            await self.router.remove_upstream(ctx, name)
            steps.append(f"router: removed {name}")
        if rec is not None:
            if not await self._engine_idle(rec.url, self.retire_timeout_s):
                steps.append(f"{name} still had requests after {self.retire_timeout_s:g}s; stopping it anyway")
            await self.stop(rec)
            steps.append(f"stopped {name} (pid {rec.pid})")
        return Applied(None, tuple(steps))

    async def scale_in(self, target: EngineTarget, ctx: ActuatorContext, name: str) -> Applied:
        """Give back replica `name` of `target`'s pool; the inverse adds one again."""
        applied = await self.remove_replica(ctx, name)
        return Applied(Action("scale_out", target.name, {"add_replicas": 1}, risk="medium",
                              description="add the replica back"), applied.steps, {"removed": name})

    # ----- the Actuator protocol -------------------------------------------------------------------

    def check(self, action: Action, ctx: ActuatorContext) -> None:
        if action.kind not in self.kinds:
            raise Refused(f"{action.kind!r} is not a launcher action ({', '.join(self.kinds)})")
        target = ctx.engines.get(action.target)
        if target is None:
            raise Refused(f"unknown engine {action.target!r} (configured: {', '.join(sorted(ctx.engines)) or 'none'})")
        if not target.launcher:
            raise Refused(f"engine {target.name!r} has no launcher command in the config")
        p = action.params
        if action.kind == "scale_in":
            self._check_scale_in(target, p)
            return
        if action.kind == "scale_out" and ("remove_replica" in p or "remove_replicas" in p):
            return
        args = self.resolve(target, p)
        tp = args.get("tensor_parallel_size")
        if tp is not None:
            cap = ctx.bounds.get("tensor_parallel_max")
            if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or (cap and tp > int(cap)):
                raise Refused(f"tensor_parallel_size {tp!r} is outside 1..{cap or 'the free GPUs'}")
            free = len(set(target.gpus) | set(self.spare_gpus(ctx)))
            if tp > free:
                raise Refused(f"tensor_parallel_size {tp} needs {tp} GPUs; {free} are free (its own "
                              f"{list(target.gpus)} + spare {self.spare_gpus(ctx)})")
        if action.kind == "scale_out" and tp is None and not any(k in p for k in ("add_replicas", "replicas")):
            raise Refused("scale_out needs params.tensor_parallel_size or params.add_replicas")

    def _check_scale_in(self, target: EngineTarget, p: Mapping[str, Any]) -> None:
        """Only a replica this launcher started, other than the pool's own engine, is given back."""
        name = p.get("remove_replica")
        if not isinstance(name, str) or not name or name == target.name:
            raise Refused(f"scale_in needs params.remove_replica, a replica other than {target.name}, got {name!r}")
        if self.record_for(name) is None:
            raise Refused(f"{name} is not a replica the doctor's launcher started (no record under {self.procs.dir}); "
                          "it is left running")

    async def apply(self, action: Action, ctx: ActuatorContext) -> Applied:
        self.check(action, ctx)
        target = ctx.engines[action.target]
        p = action.params
        if action.kind == "scale_in":
            return await self.scale_in(target, ctx, str(p["remove_replica"]))
        if action.kind == "scale_out":
            if "remove_replica" in p:
                return await self.remove_replica(ctx, str(p["remove_replica"]))
            if "remove_replicas" in p:
                steps = [s for n in p["remove_replicas"] for s in (await self.remove_replica(ctx, str(n))).steps]
                return Applied(None, tuple(steps))
            count = int(p.get("add_replicas", p.get("replicas", 0)) or 0)
            if "tensor_parallel_size" not in p:
                if count < 1:
                    raise Refused(f"add_replicas must be >= 1, got {count}")
                return await self.add_replicas(target, ctx, count)
        return await self.relaunch(target, ctx, p)
