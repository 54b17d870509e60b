"""Build the remediation machinery from the doctor's config (or flags alone).

What a caller in virtual time substitutes is I/O only: the clock (guardrails, journal, audit, cooldowns), the
HTTP transport the router and vLLM admin actuators dial, the wait between their polls, and the `Launcher`
that starts and stops engines (default: local processes, doctor.remedy.launcher.LocalLauncher).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from doctor.config import DoctorConfig
from doctor.engines import EngineRef
from doctor.remedy.actuators import default_registry
from doctor.remedy.executor import Remediator
from doctor.remedy.model import ActuatorContext, EngineTarget

if TYPE_CHECKING:
    import httpx

    from doctor.remedy.actuators import LauncherFactory


LAUNCH_ARGS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "tensor_parallel_size",
               "gpu_memory_utilization")


def actuator_context(config: DoctorConfig, state_dir: Path, *, router_url: str | None = None,
                     environ: Mapping[str, str] | None = None,
                     engines: Sequence[EngineRef] | None = None) -> ActuatorContext:
    """Engines, router and templates as the actuators see them; the token is read here and never logged.
    `engines`: the cycle's (flags and config merged, where the launcher's records say they run now); default the
    config's."""
    env = os.environ if environ is None else environ
    refs = [e.ref() for e in config.engines] if engines is None else list(engines)
    targets = {}
    for e in refs:
        args = {k: v for k, v in e.config.items() if k in LAUNCH_ARGS}
        max_len = e.config.get("max_model_len")
        targets[e.name] = EngineTarget(name=e.name, role=e.role, url=e.url, launcher=e.launcher, gpus=e.gpus,
                                       max_model_len=int(max_len) if max_len else None, args=dict(args),
                                       dcgm=e.dcgm)
    bounds = dataclasses.asdict(config.bounds)
    try:
        router_token = config.router.token(env)
    except ValueError as exc:  # SecretFileError: refused token file; the router refuses changes without a token
        logging.getLogger("doctor.remedy").error("[router] token_file: %s; no policy changes can be made", exc)
        router_token = None
    return ActuatorContext(engines=targets, state_dir=state_dir, router_url=router_url or config.router.url,
                           router_token=router_token, templates=tuple(config.templates.prompts),
                           bounds=bounds, timeout_s=config.request_timeout_s)


def remediator(config: DoctorConfig, state_dir: Path, *, router_url: str | None = None,
               environ: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time,
               transport: httpx.AsyncBaseTransport | None = None,
               sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
               launcher: LauncherFactory | None = None, sync_transport: httpx.BaseTransport | None = None,
               engines: Sequence[EngineRef] | None = None,
               gate: Callable[[], str | None] | None = None) -> Remediator:
    """The remediator over `engines` (default: the config's), with the I/O given (default: the network, local
    processes, this machine's clock)."""
    ctx = actuator_context(config, state_dir, router_url=router_url, environ=environ, engines=engines)
    if launcher is None and config.launcher.backend == "ray":  # imported here: only a Ray deployment pays for it
        from doctor.remedy.ray_launcher import ray_launcher_factory

        launcher = ray_launcher_factory(config.launcher, state_dir, env=environ, sleep=sleep)
    pool = sorted(config.bounds.gpu_pool)  # the engines' own GPUs are never spare: no pool, none known
    dcgm = {e.name: e.dcgm for e in ctx.engines.values() if e.dcgm}
    registry = default_registry(state_dir, gpu_pool=pool or None, dcgm_urls=dcgm, env=environ, clock=clock,
                                transport=transport, sleep=sleep, sync_transport=sync_transport,
                                launcher=launcher if launcher is not None else _kubernetes_launcher(config))
    starter = registry.by_kind.get("scale_out")
    count = getattr(starter, "free_gpu_count", None)
    return Remediator(config=config, state_dir=state_dir, registry=registry, ctx=ctx, clock=clock,
                      spare_gpus=(lambda: count(ctx)) if count is not None else None, gate=gate)


def _kubernetes_launcher(config: DoctorConfig) -> LauncherFactory | None:
    """The Kubernetes launcher when an engine has [engines.kubernetes] (doctor/remedy/k8s_launcher.py), else None."""
    if not any(e.kubernetes is not None for e in config.engines):
        return None
    from doctor.remedy.k8s_launcher import launcher_factory

    return launcher_factory(config)
