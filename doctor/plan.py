"""The plan of one doctor cycle: what it reads, how it judges, what it may do.

Every caller builds one (doctor diagnose from its flags and config, the daemon from its config, a trial
from its scenario) and hands it to `doctor.cycle.run_cycle`; nothing below the cycle sees a CLI's options.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doctor.engines import EngineRef

if TYPE_CHECKING:
    import httpx

    from doctor.pipeline import PlaybookSettings
    from doctor.remedy.actuators import LauncherFactory
    from doctor.remedy.engine_procs import ProcessTable


@dataclass(frozen=True)
class Plan:
    """One cycle's engines, sources, settings and state."""

    engines: tuple[EngineRef, ...]
    state_dir: Path
    settings: PlaybookSettings | None = None  # doctor.config.DoctorConfig, or seed defaults when None
    sample_s: float = 5.0  # between the two direct reads of each engine
    window_s: float = 60.0  # what the signals are judged over (earlier cycles' reads open it)
    min_requests: int = 10
    request_timeout_s: float = 5.0
    max_concurrent_reads: int = 64  # engines read at once; each within its own deadline (doctor.reading)
    long_prompt_tokens: int = 5120
    very_long_prompt_tokens: int = 8192
    router: str | None = None  # the hot/cold router's URL
    prometheus: str | None = None
    since_s: float | None = None  # with prometheus: judge this much history instead of sampling
    history: bool = True  # read and write the state directory's history (off: a one-shot look)
    fix: bool = False  # apply remedies as the mode allows
    yes: bool = False  # approve from this terminal (approve mode)
    verify_wait_s: float = 0.0  # wait this long to verify what was applied (the rest: the next cycle)
    trigger: str = "cron"  # what started the cycle (audited): cron, serve, alert:<fingerprint>, ...
    # Per engine, what started the cycle for it when not `trigger` (the daemon: the alerts waiting on an engine).
    engine_triggers: Mapping[str, str] = field(default_factory=dict)
    # I/O a caller in virtual time substitutes (the trials): the HTTP transports the engine, router and
    # dcgm-exporter reads go through (None: the network), and the wait between the two reads of each engine.
    transport: httpx.AsyncBaseTransport | None = None
    sync_transport: httpx.BaseTransport | None = None  # for dcgm-exporter (collectors.gpu.DcgmSource, in a thread)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    # With fix: what starts and stops engines (relaunch, scale_out), given the router actuator (None: local
    # processes, doctor.remedy.launcher.LocalLauncher); the router and vLLM admin actuators dial `transport`.
    launcher: LauncherFactory | None = None
    # The engines the launcher started (where a relaunch moved an engine, the replicas it added), read by every
    # cycle, fixing or not; None: the records under state_dir/engines/ (doctor.remedy.engine_procs).
    processes: ProcessTable | None = None
    # A long-lived caller (the daemon) keeps one finder of local engine processes across cycles, so it need not
    # search the host's sockets every cycle (collectors.host.LocalProcessFinder); None: a new one per cycle.
    process_finder: Any = None
    # A long-lived caller's memory of its last reads (doctor.read_memory.ReadMemory): with it, a cycle whose
    # engines were all read at most `fresh_s` ago reads each engine once; None: two reads, `sample_s` apart.
    memory: Any = None
    # With fix: asked right before each change; a reason means this doctor may not act now (a standby replica of
    # an elected pair, doctor.leader.elector.Elector.may_act); None: it may (the default: always).
    act_gate: Callable[[], str | None] | None = None
