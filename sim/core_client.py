"""How the API server talks to its engine core: in process, or to an EngineCore child (`sim.core_mp`).

vLLM V1 has the same split: `InprocClient` (VLLM_ENABLE_V1_MULTIPROCESSING=0, and the shape of V0's
in-process engine) and `AsyncMPClient` (the default: the busy loop in an `EngineCore` process). The
server (`sim.server`) only sees `EngineClient`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sim.engine import EngineConfig, EngineCore
from sim.faults import TimedFault
from sim.logfmt import LogFormatter
from sim.presets import Preset
from sim.profiles import VersionProfile
from sim.realtime import RealtimeDriver
from sim.request import SimRequest
from sim.runtime import EngineRuntime
from sim.server_info import server_config
from sim.stats import MetricsState


class EngineClient(Protocol):
    """The engine as the API server sees it."""

    profile: VersionProfile
    config: EngineConfig
    preset: Preset
    num_gpu_blocks: int
    started_at: float
    on_death: Callable[[], None] | None

    @property
    def dead(self) -> bool: ...

    @property
    def sleeping(self) -> bool: ...

    @property
    def in_flight(self) -> int: ...

    def sample_output_len(self) -> int: ...

    async def add_request(self, req: SimRequest) -> None: ...

    def abort(self, request_id: str, now: float) -> None: ...

    async def metrics(self) -> tuple[MetricsState, float]:
        """The engine's statistics (with the API server's http_* counts) and the slow-metrics delay."""
        ...

    def record_http(self, handler: str, method: str, status: int, duration_s: float) -> None: ...

    def access(self, now: float, client: str, method: str, path: str, status: int) -> None: ...

    @property
    def fmt(self) -> LogFormatter:
        """The API server's line formatter (its pid; request log lines, the ignored-flags warning)."""
        ...

    def log(self, lines: list[str]) -> None:
        """Write lines of the API server process (vLLM's RequestLogger, AsyncLLM's "Added request")."""
        ...

    async def reset_prefix_cache(self) -> None: ...

    async def sleep(self, level: int, now: float) -> None: ...

    async def wake_up(self, now: float) -> None: ...

    async def set_hung(self, hung: bool) -> None: ...

    async def apply_fault(self, fault: TimedFault, now: float) -> None: ...

    def server_config(self) -> tuple[str, dict[str, Any]]:
        """str(VllmConfig) and its JSON dump (sim.server_info), as /server_info serves them."""
        ...


class InprocClient:
    """The engine core in the API server's process, stepped by a real-time driver on the same loop."""

    def __init__(self, runtime: EngineRuntime, driver: RealtimeDriver) -> None:
        self.runtime = runtime
        self.driver = driver
        core = runtime.core
        self.profile, self.config, self.preset = core.profile, core.config, core.preset
        self.num_gpu_blocks = core.num_gpu_blocks
        self.started_at = runtime.started_at

    @property
    def core(self) -> EngineCore:
        return self.runtime.core

    @property
    def on_death(self) -> Callable[[], None] | None:
        return self.driver.on_death

    @on_death.setter
    def on_death(self, hook: Callable[[], None] | None) -> None:
        self.driver.on_death = hook

    @property
    def dead(self) -> bool:
        return self.core.dead

    @property
    def sleeping(self) -> bool:
        return bool(self.core.sleep_level)

    @property
    def in_flight(self) -> int:
        return len(self.core.requests)

    def sample_output_len(self) -> int:
        return self.core.sample_output_len()

    async def add_request(self, req: SimRequest) -> None:
        await self.driver.add_request(req)

    def abort(self, request_id: str, now: float) -> None:
        self.core.abort_request(request_id, now)
        self.driver.notify()

    async def metrics(self) -> tuple[MetricsState, float]:
        return self.core.metrics, self.core.faults.slow_metrics_s

    def record_http(self, handler: str, method: str, status: int, duration_s: float) -> None:
        self.core.metrics.record_http(handler, method, status, duration_s)

    def access(self, now: float, client: str, method: str, path: str, status: int) -> None:
        self.runtime.access(now, client, method, path, status)

    @property
    def fmt(self) -> LogFormatter:
        return self.runtime.fmt

    def log(self, lines: list[str]) -> None:
        self.runtime.sink(lines)

    async def reset_prefix_cache(self) -> None:
        self.core.reset_prefix_cache()

    async def sleep(self, level: int, now: float) -> None:
        self.runtime.sleep(level, now)

    async def wake_up(self, now: float) -> None:
        self.runtime.wake_up(now)
        self.driver.notify()

    async def set_hung(self, hung: bool) -> None:
        self.core.faults.hung = hung
        self.driver.notify()

    async def apply_fault(self, fault: TimedFault, now: float) -> None:
        self.runtime.apply_fault(fault, now)
        self.driver.notify()

    def server_config(self) -> tuple[str, dict[str, Any]]:
        return server_config(self.runtime)
