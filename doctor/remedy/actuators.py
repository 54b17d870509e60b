"""The actuator registry: action kind -> the actuator that applies it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from doctor.remedy.launcher import LocalLauncher
from doctor.remedy.model import Actuator, Refused
from doctor.remedy.router_actuator import RouterActuator
from doctor.remedy.vllm_admin import VllmAdminActuator


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
                     dcgm_urls: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None) -> Registry:
    """The local stack: router policy API, vLLM admin endpoints, local processes."""
    router = RouterActuator()
    launcher = LocalLauncher(state_dir, router=router, gpu_pool=gpu_pool, env=env)
    admin = VllmAdminActuator(router=router, launcher=launcher, dcgm_urls=dcgm_urls)
    return Registry([router, admin, launcher])
