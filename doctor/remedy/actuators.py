"""The actuator registry: action kind -> the actuator that applies it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from doctor.remedy.launcher import LocalLauncher
from doctor.remedy.model import Actuator, Refused
from doctor.remedy.router_actuator import RouterActuator
from doctor.remedy.vllm_admin import VllmAdminActuator

if TYPE_CHECKING:
    import httpx

    from doctor.remedy.model import LaunchingActuator

# Builds the launcher (an Actuator for the launcher's kinds that is also a doctor.remedy.model.Launcher) given
# the router actuator it drains and resumes engines through.
LauncherFactory = Callable[[RouterActuator], "LaunchingActuator"]


class Registry:
    """Kinds to actuators; `for_kind` refuses a kind nothing applies (escalate belongs to remedy.escalate)."""

    def __init__(self, actuators: Sequence[Actuator]) -> None:
        self.by_kind: dict[str, Actuator] = {}
        for actuator in actuators:
            for kind in actuator.kinds:
                if kind in self.by_kind:
                    raise ValueError(f"two actuators claim {kind!r}")
                self.by_kind[kind] = actuator

    def for_kind(self, kind: str) -> Actuator:
        try:
            return self.by_kind[kind]
        except KeyError:
            raise Refused(f"no actuator applies {kind!r} (known: {', '.join(sorted(self.by_kind))})") from None

    def kinds(self) -> list[str]:
        return sorted(self.by_kind)


def default_registry(state_dir: Path, *, gpu_pool: Sequence[int] | None = None,
                     dcgm_urls: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
                     clock: Callable[[], float] = time.time, transport: httpx.AsyncBaseTransport | None = None,
                     sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                     launcher: LauncherFactory | None = None,
                     sync_transport: httpx.BaseTransport | None = None) -> Registry:
    """The local stack: router policy API, vLLM admin endpoints, local processes. `transport` (default: the
    network) is what the router and admin actuators' HTTP goes through, `sleep` their wait between polls,
    `launcher` what starts and stops engines (default: local processes), `sync_transport` what dcgm-exporter
    reads go through."""
    router = RouterActuator(clock=clock, sleep=sleep)
    admin = VllmAdminActuator(router=router, dcgm_urls=dcgm_urls, sleep=sleep, sync_transport=sync_transport)
    if transport is not None:
        import httpx

        def client(timeout_s: float) -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=transport, timeout=timeout_s)

        router.client_factory = admin.client_factory = client
    starter = launcher(router) if launcher is not None else \
        LocalLauncher(state_dir, router=router, gpu_pool=gpu_pool, env=env, sleep=sleep,
                      client_factory=router.client_factory)
    admin.launcher = starter
    return Registry([router, admin, starter])
