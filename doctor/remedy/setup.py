"""Build the remediation machinery from the doctor's config (or flags alone).

What a caller in virtual time substitutes is I/O only: the clock (guardrails, journal, audit, cooldowns), the
HTTP transport the router and vLLM admin actuators dial, the wait between their polls, and the `Launcher`
that starts and stops engines (default: local processes, doctor.remedy.launcher.LocalLauncher).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from doctor.config import DoctorConfig
from doctor.remedy.actuators import default_registry
from doctor.remedy.executor import Remediator
from doctor.remedy.model import ActuatorContext, EngineTarget

if TYPE_CHECKING:
    import httpx

    from doctor.remedy.actuators import LauncherFactory


def actuator_context(config: DoctorConfig, state_dir: Path, *, router_url: str | None = None,
                     environ: Mapping[str, str] | None = None) -> ActuatorContext:
    """Engines, router and templates as the actuators see them; the token is read here and never logged."""
    env = os.environ if environ is None else environ
    engines = {}
    for e in config.engines:
        args = {k: v for k, v in dataclasses.asdict(e).items()
                if k in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "tensor_parallel_size",
                         "gpu_memory_utilization") and v is not None}
        engines[e.name] = EngineTarget(name=e.name, role=e.role, url=e.url, launcher=e.launcher, gpus=e.gpus,
                                       max_model_len=e.max_model_len, args=args, dcgm=e.dcgm)
    bounds = dataclasses.asdict(config.bounds)
    return ActuatorContext(engines=engines, state_dir=state_dir, router_url=router_url or config.router.url,
                           router_token=config.router.token(env), templates=tuple(config.templates.prompts),
                           bounds=bounds, timeout_s=config.request_timeout_s)


def remediator(config: DoctorConfig, state_dir: Path, *, router_url: str | None = None,
               environ: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time,
               transport: httpx.AsyncBaseTransport | None = None,
               sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
               launcher: LauncherFactory | None = None) -> Remediator:
    ctx = actuator_context(config, state_dir, router_url=router_url, environ=environ)
    pool = sorted({g for e in config.engines for g in e.gpus})
    dcgm = {e.name: e.dcgm for e in config.engines if e.dcgm}
    registry = default_registry(state_dir, gpu_pool=pool or None, dcgm_urls=dcgm, env=environ, clock=clock,
                                transport=transport, sleep=sleep, launcher=launcher)
    return Remediator(config=config, state_dir=state_dir, registry=registry, ctx=ctx, clock=clock)
