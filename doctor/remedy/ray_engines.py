"""Engine processes on a Ray cluster: one detached, named actor per engine (doctor.remedy.ray_actor.EngineActor).

`RayEngines` is the launcher's ProcessTable for Ray. An engine is placed by Ray with `num_gpus` = its
tensor-parallel degree (Ray picks the node and the devices and sets CUDA_VISIBLE_DEVICES); the actor spawns and
supervises the engine process on that node. The actors live in a namespace, so a later doctor adopts them; a
placement Ray cannot satisfy within `placement_timeout_s` is refused with the reason and the pending actor
removed; an actor whose node died is seen as dead (its record is gone with it). `ray` is imported on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.remedy.engine_procs import SECRET_ENV, file_stem
from doctor.remedy.model import ActuatorError, LaunchedEngine
from doctor.remedy.ray_actor import EngineActor, any_free_port

ACTOR_PREFIX = "engine:"  # named actors of the doctor's engines, in the configured namespace


class PlacementError(ActuatorError):
    """Ray could not place an engine (no node with enough free GPUs, or its node is gone); the message says why."""


@dataclass(frozen=True)
class Node:
    """One alive Ray node as the launcher sees it."""

    node_id: str
    host: str
    gpus: float
    free_gpus: float


@dataclass
class Slot:
    """An actor Ray placed, before its engine starts: where, which GPUs, the port it will listen on."""

    actor: Any
    actor_name: str
    host: str
    port: int
    gpus: tuple[int, ...]
    cuda_visible_devices: str | None


def _gpu_ints(ids: Sequence[str]) -> tuple[int, ...]:
    return tuple(int(g) for g in ids if str(g).isdigit())


class RayEngines:
    """The engines of `namespace` on the Ray cluster at `address` (None: RAY_ADDRESS, or a local raylet)."""

    def __init__(self, dir: Path, *, address: str | None = None, namespace: str = "serving-doctor",
                 placement_timeout_s: float = 60.0, call_timeout_s: float = 10.0,
                 env: Mapping[str, str] | None = None, secret_env: Sequence[str] = SECRET_ENV,
                 stop_grace_s: float = 15.0, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.dir = dir  # the engines' logs (on each node's file system) and the template's {state_dir}
        self.address, self.namespace = address, namespace
        self.placement_timeout_s, self.call_timeout_s = placement_timeout_s, call_timeout_s
        self.env, self.secret_env = dict(env or {}), list(secret_env)
        self.stop_grace_s = stop_grace_s
        self.sleep = sleep
        self._actors: dict[tuple[str, str], str] = {}  # (name, url) -> its actor's name (handles are per session)
        self._dead: dict[tuple[str, str], str] = {}  # (name, url) -> why its actor is gone
        self._actor_class: Any = None

    # ----- the cluster ---------------------------------------------------------------------------

    def ray(self) -> Any:
        """The ray module, connected to the cluster (first use only)."""
        loaded = sys.modules.get("ray")
        if loaded is None or not loaded.is_initialized():
            self._check_reachable()  # before the import: an unreachable cluster costs no `import ray`
        import ray

        if not ray.is_initialized():
            try:
                ray.init(address=self.address, namespace=self.namespace, log_to_driver=False,
                         logging_level=logging.WARNING, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise PlacementError(f"cannot connect to the Ray cluster at {self.address or 'RAY_ADDRESS/auto'}: "
                                     f"{exc}") from None
        return ray

    def _check_reachable(self, timeout_s: float = 5.0) -> None:
        """PlacementError at once when the address does not answer (ray.init retries an absent GCS for minutes)."""
        address = self.address or os.environ.get("RAY_ADDRESS") or ""
        host, sep, port = address.removeprefix("ray://").rpartition(":")
        if not sep or not port.isdigit():
            return  # auto / local: Ray finds the node's own cluster
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except OSError as exc:
            raise PlacementError(f"cannot reach the Ray cluster at {address}: {exc}") from None

    def nodes(self) -> list[Node]:
        """The alive nodes with their GPUs, total and free now."""
        ray = self.ray()
        free: dict[str, dict[str, float]] = {}
        with contextlib.suppress(Exception):  # a private call; without it, totals stand in for what is free
            from ray._private import state

            free = state.available_resources_per_node()
        out = []
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            total = float(n.get("Resources", {}).get("GPU", 0.0))
            out.append(Node(n["NodeID"], n["NodeManagerAddress"], total,
                            float(free.get(n["NodeID"], n.get("Resources", {})).get("GPU", 0.0))))
        return out

    def describe(self) -> str:
        """Free GPUs per alive node, for a refusal's reason."""
        nodes = self.nodes()
        return ", ".join(f"{n.host} {n.free_gpus:g} of {n.gpus:g}" for n in sorted(nodes, key=lambda n: n.host)) \
            or "no alive node"

    def most_free_gpus(self) -> int:
        """The most GPUs free on any one alive node (what one engine can be placed on now)."""
        return int(max((n.free_gpus for n in self.nodes()), default=0))

    # ----- placement ------------------------------------------------------------------------------

    def place(self, name: str, *, num_gpus: int, port: int = 0, host: str | None = None) -> Slot:
        """An actor for `name` with `num_gpus` GPUs (on node `host` when given), waited for at most
        `placement_timeout_s`; PlacementError with the reason when Ray cannot place it (nothing is left pending)."""
        ray = self.ray()
        nodes = self.nodes()
        opts: dict[str, Any] = {}
        if host is not None:
            node = next((n for n in nodes if n.host == host), None)
            if node is None:
                raise PlacementError(f"{name}: node {host} is not alive in the Ray cluster "
                                     f"(alive: {', '.join(n.host for n in nodes) or 'none'})")
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
            nodes = [node]
        if not any(n.gpus >= num_gpus for n in nodes):
            raise PlacementError(f"{name}: no Ray node has {num_gpus} GPU(s) at all (free/total GPUs per node: "
                                 f"{self.describe()})")
        actor_name = f"{ACTOR_PREFIX}{name}:{uuid.uuid4().hex[:8]}"
        if self._actor_class is None:
            self._actor_class = ray.remote(EngineActor)
        actor = self._actor_class.options(
            name=actor_name, namespace=self.namespace, lifetime="detached", num_gpus=num_gpus, num_cpus=0,
            max_restarts=0, **opts).remote()
        try:
            info = ray.get(actor.placement.remote(port), timeout=self.placement_timeout_s)
        except Exception as exc:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
            why = (f"not placed within {self.placement_timeout_s:g}s" if isinstance(exc, ray.exceptions.GetTimeoutError)
                   else f"its actor died while being placed ({type(exc).__name__})")
            raise PlacementError(f"{name}: Ray could not place an engine with {num_gpus} GPU(s): {why}; free/total "
                                 f"GPUs per node: {self.describe()}; the pending actor was removed") from None
        return Slot(actor, actor_name, str(info["host"]), int(info["port"]), _gpu_ints(info["gpus"]),
                    info.get("cuda_visible_devices"))

    def launch(self, slot: Slot, name: str, line: str, *, url: str, args: Mapping[str, Any],
               role: str | None = None) -> LaunchedEngine:
        """Start `line` in the placed actor; its record (kept by the actor, so a later doctor adopts it)."""
        ray = self.ray()
        log = str(self.dir / f"{file_stem(f'{name}@{slot.host}:{slot.port}')}.log")
        rec = LaunchedEngine(name, 0, slot.port, url, slot.gpus, line, log, dict(args), time.time(), None, role=role)
        try:
            data = ray.get(slot.actor.launch.remote(line, log, self.env, self.secret_env, _as_dict(rec)),
                           timeout=self.call_timeout_s)
        except Exception as exc:
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
            raise ActuatorError(f"{name}: the engine could not be started on {slot.host}: {exc}") from None
        out = _record(data)
        self._actors[(out.name, out.url)] = slot.actor_name
        return out

    # ----- ProcessTable ---------------------------------------------------------------------------

    def start(self, name: str, line: str, *, url: str, port: int, gpus: Sequence[int], args: Mapping[str, Any],
              role: str | None = None) -> LaunchedEngine:
        """Place an actor with len(gpus) GPUs and run `line` in it as given (RayLauncher.start fills the
        template for the node Ray chose instead)."""
        slot = self.place(name, num_gpus=max(1, len(gpus)), port=port)
        return self.launch(slot, name, line, url=url, args=args, role=role)

    def restart(self, old: LaunchedEngine) -> LaunchedEngine:
        """The old engine's command again, on its node and port (a rollback); PlacementError when that node is
        gone or its GPUs are taken."""
        from urllib.parse import urlsplit

        host = urlsplit(old.url).hostname or ""
        slot = self.place(old.name, num_gpus=max(1, len(old.gpus)), port=old.port, host=host)
        if slot.port != old.port:
            with contextlib.suppress(Exception):
                self.ray().kill(slot.actor, no_restart=True)
            raise PlacementError(f"{old.name}: port {old.port} on {host} is taken; the old engine cannot come back")
        return self.launch(slot, old.name, old.command, url=old.url, args=old.args, role=old.role)

    def adopt(self) -> list[LaunchedEngine]:
        """The engines of this namespace whose actors are alive (an actor whose node died is gone, record and all)."""
        ray = self.ray()
        out = []
        for entry in ray.util.list_named_actors(all_namespaces=True):
            actor_name = str(entry["name"])
            if entry["namespace"] != self.namespace or not actor_name.startswith(ACTOR_PREFIX):
                continue
            try:
                actor = ray.get_actor(actor_name, namespace=self.namespace)
                data = ray.get(actor.get_record.remote(), timeout=self.call_timeout_s)
            except Exception:  # dead, or its node is being lost: not an engine the doctor can act on
                continue
            if not data:
                continue  # placed but never started (another doctor is mid-start, or it failed)
            rec = _record(data)
            self._actors[(rec.name, rec.url)] = actor_name
            out.append(rec)
        return out

    def record_for(self, name: str) -> LaunchedEngine | None:
        recs = [r for r in self.adopt() if r.name == name]
        return max(recs, key=lambda r: r.started_at) if recs else None

    def _actor(self, rec: LaunchedEngine) -> Any | None:
        """The live actor holding `rec`, None when it is gone (dead, or its node lost)."""
        found = self._actors.get((rec.name, rec.url))
        if found is None:
            self.adopt()
            found = self._actors.get((rec.name, rec.url))
        if found is None:
            return None
        try:
            return self.ray().get_actor(found, namespace=self.namespace)
        except ValueError:  # no live actor of that name
            return None

    def _call(self, rec: LaunchedEngine, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        actor = self._actor(rec)
        if actor is None:
            raise LookupError(f"{rec.name}: no actor for {rec.url}")
        ray = self.ray()
        return ray.get(getattr(actor, method).remote(*args), timeout=timeout_s or self.call_timeout_s)

    def alive(self, rec: LaunchedEngine) -> bool:
        """The engine's process runs (its actor answers and says so); False when the actor or its node is gone."""
        try:
            return self._call(rec, "poll") is None
        except Exception as exc:
            self._dead[(rec.name, rec.url)] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return False

    def exit_code(self, rec: LaunchedEngine) -> int | None:
        with contextlib.suppress(Exception):
            code = self._call(rec, "poll")
            return None if code is None else int(code)
        return None

    def log_tail(self, rec: LaunchedEngine, lines: int = 15) -> str:
        try:
            return str(self._call(rec, "log_tail", lines))
        except Exception:
            why = self._dead.get((rec.name, rec.url), "its actor is gone")
            return f"(no log: the engine's Ray actor is gone, {why}; its node may have died)"

    async def stop(self, rec: LaunchedEngine) -> None:
        """The engine stopped by its actor (SIGTERM, SIGKILL after the grace period), then the actor removed."""
        actor = self._actor(rec)
        if actor is not None:
            ray = self.ray()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(ray.get, actor.stop.remote(self.stop_grace_s),
                                        timeout=self.stop_grace_s + self.call_timeout_s)
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self._actors.pop((rec.name, rec.url), None)

    def free_port(self, host: str) -> int:
        """A port to ask for: free here; the actor keeps it when it is free on its node too, else picks one there."""
        del host  # the node is not known before Ray places the engine
        return any_free_port("0.0.0.0")


def ray_records(dir: Path, settings: Any) -> list[LaunchedEngine]:
    """The engines a [launcher] backend = "ray" doctor started, for a cycle to read where they run now; none (and
    a warning) when the cluster cannot be reached, so the cycle reads the configured engines."""
    try:
        return RayEngines(dir, address=settings.ray_address, namespace=settings.ray_namespace).adopt()
    except ActuatorError as exc:
        logging.getLogger("doctor.remedy").warning("the Ray launcher's engines cannot be listed: %s", exc)
        return []


def _as_dict(rec: LaunchedEngine) -> dict[str, Any]:
    from dataclasses import asdict

    out = asdict(rec)
    out["gpus"] = list(rec.gpus)
    return out


def _record(data: Mapping[str, Any]) -> LaunchedEngine:
    return LaunchedEngine(**{**data, "gpus": tuple(data.get("gpus", ()))})
