"""The reading half of a diagnose run: every engine read concurrently, twice, plus logs, GPUs and host.

Sources are independent: one that fails (a hung /metrics, a missing log file, no GPU) marks only its
own signals unknown, with the reason, and the rest of the report is still produced.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from collectors.combine import EngineReading, build_signals, describe, detection_of
from collectors.httpsource import read_engine, read_health
from collectors.names import Detection
from collectors.routersource import RouterSnapshot, derive_router_signals, read_router
from collectors.types import EngineConfigView, MetricsSnapshot, Sample, Signals
from doctor.engines import EngineRef
from doctor.identity_store import IdentityStore, process_start_of
from doctor.read_memory import ReadMemory
from doctor.state import StateDir

if TYPE_CHECKING:
    from collectors.history import FrozenHistory, SignalHistory
    from collectors.snapstore import SnapshotStore
    from doctor.plan import Plan

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
BASELINE_SIGNAL = "engine_fb_bytes"  # framebuffer the engine holds, recorded per run for memory growth
Reader = Callable[..., Awaitable[Sample]]  # collectors.httpsource.read_health / read_version / read_models


def engine_deadline_s(timeout_s: float) -> float:
    """The most one engine's read may take, whatever its server does (httpx's timeout is per phase: a server that
    drips its answer a byte at a time never trips it): the request timeout plus a little for the client itself."""
    return timeout_s * 1.5 + 0.5


async def _bounded(gate: asyncio.Semaphore, name: str, url: str, client: httpx.AsyncClient, *, timeout_s: float,
                   with_identity: bool, clock: Callable[[], float], with_health: bool = True) -> list[Sample]:
    """One engine's read, waiting for a free slot, cut off at `engine_deadline_s` (its samples then carry why)."""
    async with gate:
        deadline = engine_deadline_s(timeout_s)
        try:
            async with asyncio.timeout(deadline):
                return await read_engine(client, name, url, timeout_s=timeout_s, with_identity=with_identity,
                                         with_health=with_health, clock=clock)
        except TimeoutError:
            why = f"no complete answer within {deadline:g}s (request timeout {timeout_s:g}s)"
            return [Sample("health", name, clock(), error=f"/health: {why}"),
                    Sample("metrics", name, clock(), error=f"/metrics: {why}")]


async def _read_round(client: httpx.AsyncClient, readings: list[EngineReading], *, timeout_s: float,
                      identity: set[str], clock: Callable[[], float], concurrency: int,
                      skip_health: frozenset[str] = frozenset()) -> None:
    """One read of every engine, at most `concurrency` at once, each within its own deadline; /version, /v1/models
    and /server_info too for those named in `identity`; no /health for those in `skip_health`."""
    gate = asyncio.Semaphore(max(1, concurrency))
    results = await asyncio.gather(*(_bounded(gate, r.name, r.url, client, timeout_s=timeout_s,
                                              with_identity=r.name in identity, clock=clock,
                                              with_health=r.name not in skip_health) for r in readings))
    for reading, samples in zip(readings, results, strict=True):
        reading.samples.extend(samples)


def _read_logs(ref: EngineRef, reading: EngineReading, since: float) -> None:
    from collectors.logs import scan_file

    if not ref.log:
        return
    scan = scan_file(ref.log, since, engine=ref.name)
    reading.events.extend(scan.events)
    if scan.error:
        reading.errors_extra.append(f"log {ref.log}: {scan.error}")
    for notice in scan.notices:
        reading.errors_extra.append(f"log {ref.log}: {notice}")


def _gpu_signals(ref: EngineRef, reading: EngineReading, history: SignalHistory | None, *,
                 timeout_s: float, say: Callable[[str], None], clock: Callable[[], float] = time.time,
                 transport: httpx.BaseTransport | None = None) -> None:
    """dcgm-exporter when given for the engine, else NVML on this host when GPU indices are given."""
    from collectors.gpu import DcgmSource, GpuReader, GpuSource, NvmlSource, engine_fb_bytes, gpu_signals

    source: GpuSource
    if ref.dcgm:
        url = ref.dcgm if urlsplit(ref.dcgm).path not in ("", "/") else ref.dcgm.rstrip("/") + "/metrics"
        source = DcgmSource(url, httpx.Client(timeout=timeout_s, trust_env=False, transport=transport),
                            timeout_s=timeout_s)
    elif ref.gpus:
        source = NvmlSource()
    else:
        reading.gpu_reasons = {"dram_utilization": "no GPU source for this engine (give --dcgm or --gpus)"}
        return
    readings, why = GpuReader(source, say).read(ref.gpus or None)
    if why:
        reading.gpu_reasons = {k: why for k in ("dram_utilization", "fb_used_ratio", "memory_growth_ratio",
                                                 "sm_utilization", "xid_errors", "xid_last_code", "ecc_dbe_errors")}
        return
    baseline = None
    if history is not None:
        points = history.series(ref.name, BASELINE_SIGNAL, since_s=6 * 3600)
        baseline = points[0][1] if points else None
        history.append(ref.name, clock(), {BASELINE_SIGNAL: engine_fb_bytes(readings)})
    values, reasons = gpu_signals(readings, baseline_fb_bytes=baseline)
    if baseline is None and values.get("memory_growth_ratio") is None:
        reasons["memory_growth_ratio"] = "first run: this run's framebuffer use is recorded as the baseline"
    reading.gpu_values, reading.gpu_reasons = values, reasons


ROUTER_SIGNALS = {"misrouted_share": "misrouted_share", "router_queue_p99_s": "router_queue_p99_s",
                  "rejections_per_s": "rejections_per_s", "itl_cv": "router_itl_cv",
                  "length_limit_tokens": "length_limit_tokens", "length_limit_idle_s": "length_limit_idle_s",
                  "length_limit_refusals_total": "length_limit_refusals_total"}


def _router_signals(opts: Plan, readings: dict[str, EngineReading], samples: list[Sample]) -> None:
    """The router's view of each engine (misrouting, its queue, chunk-gap CV measured from streams)."""
    snaps: list[RouterSnapshot] = [s.data["snapshot"] for s in samples
                                   if s.error is None and isinstance(s.data.get("snapshot"), RouterSnapshot)]
    errors = [s.error for s in samples if s.error]
    # router_up: whether the newest read of the router was answered (playbooks/router_down.py); an earlier
    # cycle's remembered read does not make a router that fails now up
    up: dict[str, float | None] = {"router_up": 0.0 if samples[-1].error else 1.0} if samples else {}
    down_why = {"router_up": f"{opts.router}: {samples[-1].error}"} if samples and samples[-1].error else {}
    for ref in opts.engines:
        reading = readings[ref.name]
        if errors and not snaps:
            reading.errors_extra.append(f"router {opts.router}: {errors[-1]}")
            reading.router_values, reading.router_reasons = dict(up), dict(down_why)
            continue
        if not snaps:
            continue
        prev, cur = (snaps[0], snaps[-1]) if len(snaps) > 1 else (None, snaps[-1])
        values, reasons = derive_router_signals(prev, cur, engine=ref.name)
        extra = {ROUTER_SIGNALS[k]: v for k, v in values.items() if k in ROUTER_SIGNALS}
        reading.router_values = {**extra, **up}
        reading.router_reasons = {**{ROUTER_SIGNALS[k]: v for k, v in reasons.items() if k in ROUTER_SIGNALS},
                                  **down_why}


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """One default TLS context per process: httpx builds (and loads the CA bundle into) a new one for every client,
    measured at 22 ms of CPU per cycle in the daemon, whatever the scheme of the engines' URLs."""
    return ssl.create_default_context()


def _limits(max_connections: int) -> httpx.Limits:
    """At most `max_connections` open, none kept idle. httpx's Limits(max_connections=N) alone keeps every idle
    connection, and httpcore's pool walks all its connections for each request it assigns: reading 1,000 engines
    that made 51.7 million `is_idle` calls; 200 engines read 64 at once took 22 s of CPU with every idle connection
    kept, and still 22 s with 256 kept; with none kept, 3.25 s (bench/fleet_read.py). Little is lost: an engine's
    requests of one round go out at once (one connection each), and its next round comes `sample_s` later, when
    vLLM's server (uvicorn, 5 s keep-alive) has mostly closed them. The daemon keeps its own (KeptTransport)."""
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=0)


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in LOCAL_HOSTS


@dataclass
class EngineResult:
    """One engine after a run: what was read, the signals, the detected version profile."""

    ref: EngineRef
    reading: EngineReading
    signals: Signals
    detection: Detection

    def describe(self) -> dict[str, Any]:
        return describe(self.reading, self.signals, self.detection)


class EngineHistory:
    """The state directory's history seen from one engine (playbooks.base.HistoryView)."""

    def __init__(self, history: SignalHistory | FrozenHistory, engine: str) -> None:
        self.history = history
        self.engine = engine

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return self.history.series(self.engine, signal, since_s)

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        return self.history.baseline(self.engine, signal, window_s, exclude_recent_s)


def open_history(opts: Plan, clock: Callable[[], float] = time.time) -> SignalHistory | None:
    if not opts.history:
        return None
    return _history(opts.state_dir / "history.jsonl", clock)


def open_store(opts: Plan) -> SnapshotStore | None:
    """The raw snapshots earlier runs left (direct reads only: Prometheus keeps its own history)."""
    if not opts.history or opts.since_s is not None:
        return None
    return _store(opts.state_dir / "snapshots.jsonl", max(1200.0, 4 * opts.window_s))


# One history and one store per file in a process, so that a long-lived caller's cycles (the daemon's) read only
# what was appended since their last cycle; each still sees what other processes wrote (collectors.jsonlines).
@functools.lru_cache(maxsize=32)
def _history(path: Path, clock: Callable[[], float]) -> SignalHistory:
    from collectors.history import SignalHistory

    return SignalHistory(path, clock=clock)


@functools.lru_cache(maxsize=32)
def _store(path: Path, max_age_s: float) -> SnapshotStore:
    from collectors.snapstore import SnapshotStore

    return SnapshotStore(path, max_age_s=max_age_s)


def _window_chain(store: SnapshotStore | None, ref: EngineRef, reading: EngineReading,
                  window_s: float) -> list[MetricsSnapshot] | None:
    """This run's reads after the earlier runs' kept snapshots, from the one nearest `window_s` old; this
    run's reads are kept for the next runs."""
    from collectors.window import window_chain

    own = [s.metrics for s in reading.of("metrics") if s.error is None and s.metrics is not None]
    if store is None or not own:
        return None
    earlier = [s for s in store.load(ref.name, ref.url) if s.timestamp < own[0].timestamp]
    store.save(ref.name, ref.url, own)
    if store.problems:
        reading.errors_extra.extend(store.problems)
        store.problems.clear()
    return window_chain([*earlier, *own[:-1]], own[-1], window_s)


async def read_all(opts: Plan, history: SignalHistory | None, *,
                   clock: Callable[[], float] = time.time, store: SnapshotStore | None = None) -> list[EngineResult]:
    """Read all engines over `opts.sample_s` (or from Prometheus over `opts.since_s`)."""
    readings = {e.name: EngineReading(e.name, e.role, e.url, config=_config_view(e)) for e in opts.engines}
    started = clock()
    finder = None
    local = [e for e in opts.engines if _is_local(e.url)]
    if local:
        from collectors.host import LocalProcessFinder

        finder = opts.process_finder or LocalProcessFinder()
        for e in local if opts.process_finder is None else ():  # first CPU reading; the second gives the rate
            await asyncio.to_thread(finder.read, urlsplit(e.url).port or 80)  # psutil reads /proc: off the loop
    router_samples: list[Sample] = []
    memory: ReadMemory | None = opts.memory
    once = memory is not None and _all_fresh(opts, store, started, memory.fresh_s)
    down = await _read_prometheus(opts, readings, clock=clock) if opts.since_s is not None and opts.prometheus \
        else None
    if down is None and opts.since_s is not None and opts.prometheus:
        window = opts.since_s
    else:
        if down is not None:  # Prometheus is down: the engines are read directly instead, and each says so
            readings = {e.name: EngineReading(e.name, e.role, e.url, config=_config_view(e)) for e in opts.engines}
            for reading in readings.values():
                reading.errors_extra.append(f"prometheus: {down}; fell back to reading the engine directly over "
                                            f"{opts.sample_s:g}s instead of {opts.since_s:g}s of history")
        concurrency = _concurrency(opts)
        limits = _limits(5 * min(concurrency, max(1, len(readings))))
        everyone = list(readings.values())
        async with httpx.AsyncClient(limits=limits, trust_env=False, transport=opts.transport,
                                     verify=tls_context()) as client:
            if once and memory is not None:
                remembered = {name: memory.identity_for(name, started) for name in readings}
                healthy = {name: h for name in readings if (h := memory.health_for(name, started)) is not None}
                for name, samples in remembered.items():
                    readings[name].samples.extend([*samples, *healthy.get(name, ())] if samples else
                                                  list(healthy.get(name, ())))
                await _read_round(client, everyone, timeout_s=opts.request_timeout_s,
                                  identity={n for n, s in remembered.items() if s is None}, clock=clock,
                                  concurrency=concurrency, skip_health=frozenset(healthy))
                for name in healthy:  # /metrics failed where /health was not asked: ask it now
                    metrics = readings[name].of("metrics")
                    if metrics and metrics[-1].error is not None:
                        readings[name].samples.append(await read_health(
                            client, name, readings[name].url, timeout_s=opts.request_timeout_s, clock=clock))
                if opts.router and (before := memory.router_before(opts.router, started)) is not None:
                    router_samples.append(before)
            else:
                await _read_round(client, everyone, timeout_s=opts.request_timeout_s, identity=set(readings),
                                  clock=clock, concurrency=concurrency)
                if opts.router:
                    router_samples.append(await read_router(client, opts.router, timeout_s=opts.request_timeout_s,
                                                            clock=clock))
                await opts.sleep(opts.sample_s)
                await _read_round(client, everyone, timeout_s=opts.request_timeout_s, identity=set(), clock=clock,
                                  concurrency=concurrency)
            if opts.router:
                router_samples.append(await read_router(client, opts.router, timeout_s=opts.request_timeout_s,
                                                        clock=clock))
        if memory is not None:
            for name, reading in readings.items():
                memory.remember(name, reading.samples, started)
            if opts.router:
                memory.router[opts.router] = router_samples[-1]
        window = max(opts.sample_s, 0.0) if not once else 0.0
    _router_signals(opts, readings, router_samples)
    chains = await asyncio.to_thread(_local_reads, opts, readings, history, store, finder,
                                     log_since=started - max(window, 300.0), clock=clock)
    out = []
    for ref in opts.engines:
        reading = readings[ref.name]
        chain = chains[ref.name]
        signals = build_signals(reading, window_s=window, long_prompt_tokens=opts.long_prompt_tokens,
                                very_long_prompt_tokens=opts.very_long_prompt_tokens, chain=chain,
                                min_requests=opts.min_requests)
        out.append(EngineResult(ref, reading, signals, detection_of(reading)))
    return out


def _local_reads(opts: Plan, readings: dict[str, EngineReading], history: SignalHistory | None,
                 store: SnapshotStore | None, finder: Any, *, log_since: float,
                 clock: Callable[[], float]) -> dict[str, list[MetricsSnapshot] | None]:
    """What each engine's reading needs from this host, off the event loop in one go (files, NVML or dcgm, psutil,
    the snapshot store): its log's events, GPU and process signals, and its window chain. One hand-off a cycle, not
    four per engine: each cost the daemon ~0.1 ms of CPU (thread wake-ups both ways)."""
    chains: dict[str, list[MetricsSnapshot] | None] = {}
    for ref in opts.engines:
        reading = readings[ref.name]
        _read_logs(ref, reading, log_since)
        _gpu_signals(ref, reading, history, timeout_s=opts.request_timeout_s, say=reading.errors_extra.append,
                     clock=clock, transport=opts.sync_transport)
        if finder is not None and _is_local(ref.url):
            from collectors.host import local_process_signals

            host = finder.read(urlsplit(ref.url).port or 80)
            reading.host_values, reading.host_reasons = local_process_signals(host)
    for ref in opts.engines:
        chains[ref.name] = _window_chain(store, ref, readings[ref.name], opts.window_s)
    return chains


def _all_fresh(opts: Plan, store: SnapshotStore | None, now: float, fresh_s: float) -> bool:
    """Whether every engine's newest kept snapshot is at most `fresh_s` old (then one read opens the window)."""
    if store is None or opts.since_s is not None:
        return False
    for ref in opts.engines:
        newest = store.newest(ref.name, ref.url)
        if newest is None or now - newest > fresh_s:
            return False
    return True


def record_history(history: SignalHistory | None, results: list[EngineResult], now: float) -> None:
    """Append this run's numbers (after the playbooks read the older ones as baselines)."""
    if history is None:
        return
    rows = {r.ref.name: {k: v for k, v in r.signals.values.items() if isinstance(v, float)}
            for r in results if r.reading.last_ok("metrics") is not None}
    if rows:
        history.append_many(now, rows)


def _config_view(ref: EngineRef) -> EngineConfigView:
    return EngineConfigView(max_num_seqs=ref.int_arg("max_num_seqs"),
                            max_num_batched_tokens=ref.int_arg("max_num_batched_tokens"),
                            max_model_len=ref.int_arg("max_model_len"),
                            router_max_in_flight=ref.int_arg("router_max_in_flight"),
                            tensor_parallel_size=ref.int_arg("tensor_parallel_size"),
                            gpu_memory_utilization=ref.config.get("gpu_memory_utilization"))


def _concurrency(opts: Plan) -> int:
    return max(1, opts.max_concurrent_reads)


async def _read_prometheus(opts: Plan, readings: dict[str, EngineReading], *,
                           clock: Callable[[], float]) -> str | None:
    """Two snapshots of every engine from Prometheus, `since` apart, each one query for the whole fleet
    (collectors.promfleet; the same derive step as direct scrapes); then each engine's health and identity,
    read directly, at most `max_concurrent_reads` engines at once. Returns why, when Prometheus itself does not
    answer (the caller reads the engines directly instead)."""
    from collectors.httpsource import read_health, read_models, read_version
    from collectors.promfleet import fleet_snapshots_over
    from collectors.promsource import PrometheusError, PrometheusSource, PrometheusUnreachable

    assert opts.prometheus is not None and opts.since_s is not None
    source = PrometheusSource(opts.prometheus, timeout_s=opts.request_timeout_s)
    now = clock()
    selectors = {ref.name: ref.promql_selector for ref in opts.engines}
    gate = asyncio.Semaphore(_concurrency(opts))
    timeout_s = opts.request_timeout_s
    store: IdentityStore | None = IdentityStore(StateDir(opts.state_dir))  # a cache, kept with --no-history too
    kept = {ref.name: got for ref in opts.engines
            if store is not None and (got := store.recall(ref.name, ref.url, now, check_start=False)) is not None}

    async def identity(client: httpx.AsyncClient, ref: EngineRef, reads: tuple[Reader, ...]) -> list[Sample]:
        async with gate:
            try:
                async with asyncio.timeout(engine_deadline_s(timeout_s)):
                    return list(await asyncio.gather(*(read(client, ref.name, ref.url, timeout_s=timeout_s,
                                                            clock=clock) for read in reads)))
            except TimeoutError:
                return [Sample("health", ref.name, clock(),
                               error=f"/health: no complete answer within {engine_deadline_s(timeout_s):g}s")]

    limits = _limits(3 * min(_concurrency(opts), max(1, len(opts.engines))))
    client = httpx.AsyncClient(trust_env=False, transport=opts.transport, verify=tls_context(), limits=limits)
    everything: tuple[Reader, ...] = (read_health, read_version, read_models)

    async def identities(refs: list[EngineRef], *, health: bool) -> list[list[Sample]]:
        return list(await asyncio.gather(*(
            identity(client, ref, everything if ref.name not in kept else (read_health,)) if health
            else identity(client, ref, everything[1:]) for ref in refs)))

    async with client:
        # The engines' own answers are read while Prometheus answers (both points in one range query per chunk of
        # engines, two chunks at a time, in worker threads: collectors.promfleet.fleet_snapshots_over);
        # /version and /v1/models only where the state directory has no answer of the last hour.
        direct = asyncio.ensure_future(identities(list(opts.engines), health=True))
        times = (now - opts.since_s, now) if opts.since_s > 0 else (now,)
        try:
            answers = await asyncio.to_thread(fleet_snapshots_over, source, selectors, times)
        except BaseException:
            direct.cancel()
            raise
        for t, snaps in zip(times, answers, strict=True):
            for name, snap in snaps.items():
                if isinstance(snap, PrometheusUnreachable):
                    direct.cancel()
                    await asyncio.wait([direct])  # ended before the caller reads the engines itself
                    return str(snap)
                if isinstance(snap, PrometheusError):
                    readings[name].samples.append(Sample("metrics", name, t, error=str(snap)))
                else:
                    readings[name].samples.append(Sample("metrics", name, t, metrics=snap))
        found = await direct
        starts = {ref.name: process_start_of(readings[ref.name].samples) for ref in opts.engines}
        answered = {ref.name for ref, samples in zip(opts.engines, found, strict=True)
                    if any(s.source == "health" and s.error is None for s in samples)}
        # A remembered identity holds only while the engine runs the process it was read from and answers; one
        # that does not answer now is not asked again, and its identity is forgotten (it may come back another).
        again = [ref for ref in opts.engines if ref.name in kept and store is not None and (
            ref.name not in answered or store.recall(ref.name, ref.url, now, process_start=starts[ref.name]) is None)]
        for ref in again:
            del kept[ref.name]
        again = [ref for ref in again if ref.name in answered]
        reread = dict(zip((ref.name for ref in again), await identities(again, health=False), strict=True))
    for ref, samples in zip(opts.engines, found, strict=True):
        fresh = [*samples, *reread.get(ref.name, ())]
        readings[ref.name].samples.extend([*fresh, *kept.get(ref.name, ())])
        if store is not None and ref.name not in kept:
            store.keep(ref.name, ref.url, fresh, now, starts[ref.name])
    if store is not None:
        store.save()
        if store.problems and opts.engines:
            readings[opts.engines[0].name].errors_extra.extend(store.problems)
    return None
