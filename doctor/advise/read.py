"""Reading the engines for advice: the snapshots the doctor kept (collectors.snapstore in the state directory)
and, with `--sample`, fresh direct reads over that long; plus what the engine says of its own settings."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from collectors.combine import EngineReading, config_of
from collectors.httpsource import read_engine
from collectors.snapstore import SnapshotStore
from collectors.types import EngineConfigView, MetricsSnapshot
from doctor.engines import EngineRef

Sleep = Callable[[float], Awaitable[None]]


@dataclass
class EngineWindow:
    """One engine's reads: the chain of snapshots (oldest first), its settings as known, its model, problems."""

    ref: EngineRef
    chain: list[MetricsSnapshot] = field(default_factory=list)
    config: EngineConfigView = field(default_factory=EngineConfigView)
    model: str | None = None
    problems: list[str] = field(default_factory=list)


def _config_view(ref: EngineRef) -> EngineConfigView:
    return EngineConfigView(max_num_seqs=ref.int_arg("max_num_seqs"),
                            max_num_batched_tokens=ref.int_arg("max_num_batched_tokens"),
                            max_model_len=ref.int_arg("max_model_len"),
                            tensor_parallel_size=ref.int_arg("tensor_parallel_size"))


async def read_windows(engines: Sequence[EngineRef], *, state_dir: Path | None, sample_s: float, every_s: float,
                       window_s: float, timeout_s: float, clock: Callable[[], float],
                       sleep: Sleep = asyncio.sleep, transport: httpx.AsyncBaseTransport | None = None
                       ) -> list[EngineWindow]:
    """Each engine's kept snapshots no older than `window_s`, then reads every `every_s` for `sample_s`
    (one read when `sample_s` is 0: it closes the kept window)."""
    store = SnapshotStore(state_dir / "snapshots.jsonl") if state_dir is not None and \
        (state_dir / "snapshots.jsonl").exists() else None
    readings = {e.name: EngineReading(e.name, e.role, e.url, config=_config_view(e)) for e in engines}
    out = {e.name: EngineWindow(e) for e in engines}
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        started = clock()
        first = True
        while True:
            got = await asyncio.gather(*(read_engine(client, e.name, e.url, timeout_s=timeout_s, with_identity=first,
                                                     clock=clock) for e in engines))
            for e, samples in zip(engines, got, strict=True):
                readings[e.name].samples.extend(samples)
            first = False
            if clock() - started >= sample_s - 1e-9:
                break
            await sleep(min(every_s, sample_s - (clock() - started)))
    for e in engines:
        w, reading = out[e.name], readings[e.name]
        fresh = [s.metrics for s in reading.of("metrics") if s.error is None and s.metrics is not None]
        w.problems += [f"{s.source}: {s.error}" for s in reading.samples if s.error and s.source != "server_info"]
        kept: list[MetricsSnapshot] = []
        if store is not None:
            kept = [s for s in store.load(e.name, e.url) if not fresh or s.timestamp < fresh[0].timestamp]
            w.problems += store.problems
        chain = [*kept, *fresh]
        if chain:
            chain = [s for s in chain if s.timestamp >= chain[-1].timestamp - window_s]
        w.chain = chain
        w.config = config_of(reading)
        models = reading.last_ok("models")
        w.model = str(models.data.get("model")) if models and models.data.get("model") else None
    return list(out.values())


MAX_PROM_POINTS = 720  # instant queries per engine group at most; a longer --since is read at a coarser step


def read_prometheus_windows(engines: Sequence[EngineRef], *, url: str, since_s: float, step_s: float,
                            clock: Callable[[], float], timeout_s: float, source: Any | None = None
                            ) -> list[EngineWindow]:
    """Each engine's window from a Prometheus server's history: its series at every `step_s` over the last
    `since_s` (one instant query per step for the whole fleet, collectors.promfleet), as the snapshots a direct
    read would have taken. Synchronous (prometheus-api-client); AdviseError when Prometheus does not answer."""
    from collectors.promfleet import fleet_snapshots_at
    from collectors.promsource import PrometheusError, PrometheusSource, PrometheusUnreachable
    from doctor.advise import AdviseError

    try:
        src = source if source is not None else PrometheusSource(url, timeout_s=timeout_s)
    except PrometheusError as exc:
        raise AdviseError(f"doctor advise: error: --prometheus: {exc}") from None
    end = clock()
    points = max(1, min(MAX_PROM_POINTS, int(since_s / step_s)))
    step = since_s / points
    selectors = {e.name: e.promql_selector for e in engines}
    out = {e.name: EngineWindow(e, config=_config_view(e)) for e in engines}
    for i in range(points + 1):
        t = end - since_s + i * step
        try:
            got = fleet_snapshots_at(src, selectors, t)
        except PrometheusUnreachable as exc:
            raise AdviseError(f"doctor advise: {exc}") from None
        for name, snap in got.items():
            w = out[name]
            if isinstance(snap, PrometheusError):
                if str(snap) not in w.problems and len(w.problems) < 5:
                    w.problems.append(str(snap))
            elif not w.chain or snap.timestamp > w.chain[-1].timestamp:  # one scrape seen by several steps
                w.chain.append(snap)
    for w in out.values():
        if w.chain and step_s < since_s:
            w.problems += [] if len(w.chain) > 1 else [f"Prometheus holds one scrape of {w.ref.name} in the last "
                                                        f"{since_s:g}s"]
    return list(out.values())
