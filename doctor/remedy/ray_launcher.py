"""The Ray launcher backend: LocalLauncher's relaunch, blue/green, rollback and replicas, with engines as Ray actors.

`RayLauncher` changes only where an engine runs: Ray places it (doctor.remedy.ray_engines.RayEngines) and the
command template is filled in for the node and port Ray chose ({host} is the node's address). Free GPUs are
Ray's: the most GPUs free on one alive node. An action no node can hold is refused with the free GPUs per node;
one that Ray does not place within `placement_timeout_s` fails with that reason and leaves nothing pending.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from doctor.config_launcher import LauncherSettings
from doctor.remedy.launcher import LocalLauncher
from doctor.remedy.model import ActuatorContext, Applied, EngineTarget, LaunchedEngine, Refused
from doctor.remedy.ray_engines import PlacementError, RayEngines
from doctor.remedy.router_actuator import RouterActuator
from playbooks.model import Action


def _on(url: str, host: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


class RayLauncher(LocalLauncher):
    """Engines as detached Ray actors in `namespace` on the cluster at `address` (see RayEngines)."""

    def __init__(self, state_dir: Path, *, address: str | None = None, namespace: str = "serving-doctor",
                 placement_timeout_s: float = 60.0, engines: RayEngines | None = None,
                 router: RouterActuator | None = None, env: Mapping[str, str] | None = None,
                 stop_grace_s: float = 15.0, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 **kw: Any) -> None:
        """`engines` (default: RayEngines under STATE_DIR/engines for `address` and `namespace`); the rest as
        LocalLauncher's (its `gpu_pool` and `free_memory` do not apply: Ray owns the GPUs)."""
        self.ray_engines = engines if engines is not None else RayEngines(
            Path(state_dir) / "engines", address=address, namespace=namespace,
            placement_timeout_s=placement_timeout_s, env=env, stop_grace_s=stop_grace_s, sleep=sleep)
        super().__init__(state_dir, router=router, env=env, stop_grace_s=stop_grace_s, sleep=sleep,
                         procs=self.ray_engines, **kw)
        self._pin: str | None = None  # the node an in-place relaunch starts on (its own), while one runs

    # ----- where an engine runs ---------------------------------------------------------------------

    def start(self, target: EngineTarget, *, port: int, gpus: Sequence[int], args: Mapping[str, Any]) -> LaunchedEngine:
        """Placed by Ray with len(gpus) GPUs (the tensor-parallel degree), then its template filled in for that
        node and port. An in-place start stays on the engine's node while that is alive."""
        merged = {**target.args, **args}
        pin = self._pin if self._pin in {n.host for n in self.ray_engines.nodes()} else None
        slot = self.ray_engines.place(target.name, num_gpus=max(1, len(gpus)), port=port, host=pin)
        placed = replace(target, url=_on(target.url, slot.host, slot.port))
        try:
            line = self.command(placed, port=slot.port, gpus=slot.gpus, args=merged)
        except BaseException:
            with contextlib.suppress(Exception):
                self.ray_engines.ray().kill(slot.actor, no_restart=True)
            raise
        return self.ray_engines.launch(slot, target.name, line, url=placed.url, args=merged, role=target.role)

    def spare_gpus(self, ctx: ActuatorContext, bytes_ratio: float = 0.9) -> list[int]:
        """Slots 0..n-1 for the n GPUs free on the freest alive node (Ray picks the node and the devices); none
        while the cluster cannot be reached."""
        try:
            return list(range(self.ray_engines.most_free_gpus()))
        except PlacementError:
            return []

    def free_gpu_count(self, ctx: ActuatorContext) -> int | None:
        """The GPUs free on the freest node; None (unknown) while the cluster cannot be reached."""
        try:
            return self.ray_engines.most_free_gpus()
        except PlacementError:
            return None

    # ----- refusals with Ray's reason -----------------------------------------------------------------

    def check(self, action: Action, ctx: ActuatorContext) -> None:
        try:
            self._check_ray(action, ctx)
        except PlacementError as exc:  # the cluster cannot be reached: nothing can be placed
            raise Refused(str(exc)) from None
        super().check(action, ctx)

    def _check_ray(self, action: Action, ctx: ActuatorContext) -> None:
        target = ctx.engines.get(action.target)
        p = action.params
        if target is None or action.kind not in self.kinds or "remove_replica" in p:
            return
        tp = p.get("tensor_parallel_size")
        if action.kind == "scale_out" and tp is None and any(k in p for k in ("add_replicas", "replicas")):
            need = self._tp(target, {})
            if self.ray_engines.most_free_gpus() < need:
                raise Refused(f"{target.name}: a replica needs {need} GPU(s) on one node and no Ray node has "
                              f"them free (free/total GPUs per node: {self.ray_engines.describe()})")
        elif isinstance(tp, int) and not isinstance(tp, bool):
            best = max([self.ray_engines.most_free_gpus(), *self._own_node_free(target)])
            if tp > best:
                raise Refused(f"{target.name}: tensor_parallel_size {tp} needs {tp} GPUs on one node; the most "
                              f"a node can give is {best} (free/total GPUs per node: {self.ray_engines.describe()})")

    def _own_node_free(self, target: EngineTarget) -> list[int]:
        """What the engine's own node can give it in place: its free GPUs plus the engine's own."""
        host = urlsplit(target.url).hostname
        return [int(n.free_gpus) + len(target.gpus) for n in self.ray_engines.nodes() if n.host == host]

    # ----- in place on a lost node ------------------------------------------------------------------

    async def _in_place(self, target: EngineTarget, ctx: ActuatorContext, args: dict[str, Any],
                        old: LaunchedEngine | None, gpus: list[int], role: str | None) -> Applied:
        """LocalLauncher's in-place relaunch; when the engine came up elsewhere (its node was gone), the router
        is pointed at where it runs now."""
        was = target.url
        self._pin = urlsplit(target.url).hostname
        try:
            applied = await super()._in_place(target, ctx, args, old, gpus, role)
        finally:
            self._pin = None
        if role is not None and self.router is not None and target.url != was:
            await self.router.swap_upstream(ctx, target.name, target.name, target.url)
            applied = replace(applied, steps=(*applied.steps, f"router: {target.name} now {target.url} (was {was})"))
        return applied


def ray_launcher_factory(settings: LauncherSettings, state_dir: Path, *, env: Mapping[str, str] | None = None,
                         sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
                         ) -> Callable[[RouterActuator], RayLauncher]:
    """The config's [launcher] backend = "ray" as doctor.remedy.actuators' LauncherFactory."""

    def build(router: RouterActuator) -> RayLauncher:
        return RayLauncher(state_dir, address=settings.ray_address, namespace=settings.ray_namespace,
                           placement_timeout_s=settings.placement_timeout_s, router=router, env=env, sleep=sleep,
                           client_factory=router.client_factory)

    return build
