"""Wire the daemon together from the config: the plan of its cycles, the queue, the audit log, the API, uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor.config import DoctorConfig
from doctor.plan import Plan
from doctor.serve.auth import Credentials

log = logging.getLogger("doctor.serve")


def plan_for(config: DoctorConfig, state_dir: Path) -> Plan:
    """The daemon's cycle: direct reads of every engine, history kept, remedies as the mode allows; one read of
    each engine per cycle while its previous cycle's read is at most three intervals old (that read opens the
    window; else two reads at most half an interval apart), connections kept open from cycle to cycle, and
    nothing waited for verification inside a cycle (the next cycles verify)."""
    from collectors.host import LocalProcessFinder
    from doctor.read_memory import ReadMemory
    from doctor.wire_transport import KeptTransport

    interval = config.serve.interval_s
    sample = min(config.sample_s, max(0.2, interval / 2))
    return Plan(engines=tuple(config.engine_refs()), state_dir=state_dir, settings=config, sample_s=sample,
                window_s=max(config.window_s, sample), min_requests=config.min_requests,
                request_timeout_s=min(config.request_timeout_s, config.timeout_s),
                long_prompt_tokens=config.long_prompt_tokens, very_long_prompt_tokens=config.very_long_prompt_tokens,
                router=config.router.url, history=True, fix=True, verify_wait_s=0.0, trigger="serve",
                max_concurrent_reads=config.max_concurrent_reads,
                process_finder=LocalProcessFinder(), memory=ReadMemory(fresh_s=3 * interval),
                transport=KeptTransport(max_connections=8 * max(1, len(config.engines)) + 8))


async def serve(config: DoctorConfig, state_dir: Path, creds: Credentials, sock: socket.socket, *,
                tls: Mapping[str, Any] | None = None) -> None:
    """Run until SIGTERM or SIGINT; `tls`: uvicorn's ssl_* keywords (router.listen.tls_options), or plain HTTP."""
    import uvicorn

    from doctor.cycle import run_cycle
    from doctor.remedy.setup import remediator
    from doctor.serve.app import Api
    from doctor.serve.events import EventHub
    from doctor.serve.inbox import Inbox
    from doctor.serve.mapping import AlertMapper
    from doctor.serve.metrics import DaemonMetrics
    from doctor.serve.quiet_server import QuietServer
    from doctor.serve.runner import Daemon
    from doctor.wire_transport import KeptTransport
    from router.guard import guarded_protocol

    settings = config.serve
    plan = plan_for(config, state_dir)
    rem = remediator(config, state_dir)
    for secret in creds.secrets():
        rem.audit.add_secret(secret)
    inbox = await asyncio.to_thread(Inbox, state_dir, capacity=settings.queue_size)
    daemon = Daemon(plan, interval_s=settings.interval_s, alert_wait_s=settings.alert_wait_s, inbox=inbox,
                    mapper=AlertMapper(plan.engines, labels=settings.engine_labels,
                                       alert_playbooks=settings.alert_playbooks, router=plan.router),
                    audit=rem.audit, metrics=DaemonMetrics(), events=EventHub(), cycle=run_cycle,
                    cycle_timeout_s=max(config.timeout_s, 2 * plan.sample_s + 2 * plan.request_timeout_s + 5))
    elector = None
    if settings.leader is not None:
        from doctor.leader.setup import elector_for

        elector = elector_for(settings.leader, note=rem.audit.note, on_change=daemon.leading_changed)
        daemon.elector = elector
        rem.gate = elector.may_act  # people's decisions through the API: only the leader acts on them
        daemon.metrics.leader.set_function(lambda: 0.0 if elector.may_act() else 1.0)
        log.info("leader election through %s as %s: standby until the lease is held", elector.store.name,
                 elector.identity)
    electing = asyncio.create_task(elector.run(), name="doctor-serve-leader") if elector is not None else None
    from doctor.notify import Notifier
    from doctor.serve.notifications import attach

    notifier = Notifier.from_settings(config.notify)
    sends = attach(daemon.events.listen, lambda: daemon.latest, notifier) if notifier is not None else set()
    loops = asyncio.create_task(daemon.run(), name="doctor-serve-loops")
    api = Api(daemon, rem, rem.audit, creds, settings.body_limit_bytes, settings.history_points, config.router.url,
              rem.ctx.router_token, alive=lambda: not loops.done())
    http = guarded_protocol(max_header_bytes=settings.header_limit_bytes)
    server = QuietServer(uvicorn.Config(api.app(), log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=5, http=http, **dict(tls or {})))
    host, port = sock.getsockname()[:2]
    log.info("listening on %s://%s:%s; %d engines every %gs; mode %s; state %s (pid %d)", "https" if tls else "http",
             host, port, len(plan.engines), settings.interval_s, config.mode, state_dir, os.getpid())
    if threading.current_thread() is threading.main_thread():
        # uvicorn raises the signal that stopped it again once it has shut down; SIGTERM's default action would
        # end the process there, before the cleanup below (the lease released, notifications flushed): the
        # re-raised SIGTERM reaches this no-op instead, and the daemon exits 0 after its cleanup.
        signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        await server.serve(sockets=[sock])
    finally:
        loops.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await loops
        if elector is not None and electing is not None:  # nothing acts any more: the lease goes to the other
            electing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await electing
            with contextlib.suppress(Exception):
                await elector.release()
            await elector.store.aclose()
        if isinstance(plan.transport, KeptTransport):
            with contextlib.suppress(Exception):
                await plan.transport.close()
        if notifier is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 5.0)
                await notifier.flush()
            await notifier.aclose()
