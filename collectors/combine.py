"""Put one engine's reads together: health, version profile, metric signals, GPU, host and log events."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collectors.derive import MIN_REQUESTS, derive_window
from collectors.names import Detection, detect_profile
from collectors.scrape import has_engine_label
from collectors.types import SIGNAL_NAMES, EngineConfigView, Event, HealthState, MetricsSnapshot, Sample, Signals
from collectors.window import window_view

# Signals whose reason is kept with their value, not only when it is missing: a state the reason explains
# (router_up 0: what the read of the router answered).
EXPLAINED_STATES: frozenset[str] = frozenset({"router_up"})

@dataclass
class EngineReading:
    """Everything read about one engine during one run of the doctor."""

    name: str
    role: str | None
    url: str
    samples: list[Sample] = field(default_factory=list)
    gpu_values: Mapping[str, float | None] = field(default_factory=dict)
    gpu_reasons: Mapping[str, str] = field(default_factory=dict)
    host_values: Mapping[str, float | None] = field(default_factory=dict)
    host_reasons: Mapping[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    config: EngineConfigView = field(default_factory=EngineConfigView)
    errors_extra: list[str] = field(default_factory=list)  # problems of sources other than HTTP samples
    router_values: Mapping[str, float | None] = field(default_factory=dict)
    router_reasons: Mapping[str, str] = field(default_factory=dict)

    def of(self, source: str) -> list[Sample]:
        return [s for s in self.samples if s.source == source]

    def last_ok(self, source: str) -> Sample | None:
        ok = [s for s in self.of(source) if s.error is None]
        return ok[-1] if ok else None

    def errors(self) -> list[str]:
        return [f"{s.source}: {s.error}" for s in self.samples if s.error] + self.errors_extra


def health_of(reading: EngineReading, dead_from_logs: bool) -> tuple[HealthState, int | None]:
    """ok when /health answered 200 (and no death in the logs), unhealthy on any other answer."""
    sample = reading.last_ok("health")
    if sample is None:
        return "unreachable", None
    status = int(sample.data.get("status", 0))
    if status == 200 and not dead_from_logs:
        return "ok", status
    return "unhealthy", status


def detection_of(reading: EngineReading) -> Detection:
    version = reading.last_ok("version")
    metrics = reading.last_ok("metrics")
    names = metrics.metrics.names_seen if metrics and metrics.metrics else frozenset()
    engine_label = has_engine_label(metrics.metrics) if metrics and metrics.metrics else None
    return detect_profile(version.data.get("version") if version else None, names, has_engine_label=engine_label)


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _as_ratio(value: Any) -> float | None:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        return None
    return ratio if 0.0 < ratio <= 1.0 else None


def _from_events(events: Sequence[Event], key: str, convert: Callable[[Any], Any] = _as_int) -> Any:
    """The newest start-up log line that revealed `key` (directly or in its non-default args)."""
    for event in reversed(events):
        if event.kind != "startup_config":
            continue
        for where in (event.details, *(v for v in event.details.values() if isinstance(v, Mapping))):
            value = convert(where.get(key))
            if value is not None:
                return value
    return None


def config_of(reading: EngineReading) -> EngineConfigView:
    """Known limits, first found wins: given config, /server_info, start-up log lines, /v1/models, cache_config_info."""
    cfg = reading.config
    info = reading.last_ok("server_info")
    server = dict(info.data) if info else {}
    models = reading.last_ok("models")
    metrics = reading.last_ok("metrics")
    cache = metrics.metrics.info.get("cache_config", {}) if metrics and metrics.metrics else {}

    def pick(key: str, *more: Any) -> int | None:
        for value in (getattr(cfg, key), server.get(key), _from_events(reading.events, key), *more):
            as_int = _as_int(value)
            if as_int is not None:
                return as_int
        return None

    return EngineConfigView(
        max_num_seqs=pick("max_num_seqs"),
        max_num_batched_tokens=pick("max_num_batched_tokens"),
        max_model_len=pick("max_model_len", models.data.get("max_model_len") if models else None),
        num_gpu_blocks=pick("num_gpu_blocks", cache.get("num_gpu_blocks")),
        block_size=pick("block_size", cache.get("block_size")),
        router_max_in_flight=cfg.router_max_in_flight,
        tensor_parallel_size=pick("tensor_parallel_size"),
        gpu_memory_utilization=next((r for r in (
            _as_ratio(cfg.gpu_memory_utilization), _as_ratio(server.get("gpu_memory_utilization")),
            _from_events(reading.events, "gpu_memory_utilization", _as_ratio),
            _as_ratio(cache.get("gpu_memory_utilization"))) if r is not None), None),
    )


def build_signals(reading: EngineReading, *, window_s: float, long_prompt_tokens: int = 5120,
                  very_long_prompt_tokens: int = 8192, chain: Sequence[MetricsSnapshot] | None = None,
                  min_requests: int = MIN_REQUESTS) -> Signals:
    """The Signals of one engine from its samples, in the report's shape.

    `chain`: the snapshots of a longer window (collectors.window.window_chain: earlier runs' snapshots and
    this run's, oldest first); without it the window is this run's own reads.
    """
    values: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    weak: dict[str, float] = {}
    metrics = [s for s in reading.of("metrics") if s.error is None and s.metrics is not None]
    failed = [s for s in reading.of("metrics") if s.error]
    config = config_of(reading)
    snaps: list[MetricsSnapshot] = list(chain) if chain and len(chain) >= 2 else [
        s.metrics for s in metrics if s.metrics is not None]
    if len(snaps) >= 2:
        view = window_view(snaps)
        got = derive_window(view.base, view.cur, config, long_prompt_tokens=long_prompt_tokens,
                            very_long_prompt_tokens=very_long_prompt_tokens, gauges=view.gauges,
                            resets=view.resets, min_requests=min_requests)
        values.update(got.values)
        reasons.update(got.reasons)
        weak.update(got.weak)
        window_s = view.length_s
        idle = view.unchanged_s.get("generation_tokens")
        values["generation_idle_s"] = idle
        reasons["generation_idle_s"] = ("vllm:generation_tokens_total not in the scrape" if idle is None else
                                        f"since vllm:generation_tokens_total last moved, within the {window_s:g}s "
                                        f"window's {view.reads} reads")
    elif len(snaps) == 1:
        got = derive_window(snaps[0], snaps[0], config, long_prompt_tokens=long_prompt_tokens,
                            very_long_prompt_tokens=very_long_prompt_tokens, min_requests=min_requests)
        values.update(got.values)
        reasons.update(got.reasons)
        for name in SIGNAL_NAMES:
            if name not in ("running", "waiting", "kv_cache_usage", "uptime_s", "process_rss_bytes"):
                values.pop(name, None)
                reasons.setdefault(name, "only one /metrics read succeeded: rates and quantiles need two")
    else:
        why = failed[-1].error if failed else "/metrics was not read"
        for name in SIGNAL_NAMES:
            reasons[name] = why or "no /metrics"
    if metrics and metrics[-1].metrics is not None and not metrics[-1].metrics.stats_enabled:
        reasons["stats"] = "no vllm: metrics exposed: the engine runs with --disable-log-stats (not idle)"
    for source_values, source_reasons in ((reading.gpu_values, reading.gpu_reasons),
                                          (reading.host_values, reading.host_reasons),
                                          (reading.router_values, reading.router_reasons)):
        for k, val in source_values.items():
            if values.get(k) is None:  # the engine's own metrics win (process_* works for remote engines)
                values[k] = val
                if val is not None:
                    reasons.pop(k, None)
        for k, why in source_reasons.items():
            if values.get(k) is None or k in EXPLAINED_STATES:
                reasons[k] = why
    for name, val in values.items():  # any source: a reading that is not a finite number is bad input
        if val is not None and not math.isfinite(val):
            values[name] = None
            reasons[name] = f"came out as {val!r}, not a finite number: bad input, unknown"
    for name in SIGNAL_NAMES:
        if values.get(name) is None and name not in reasons:
            reasons[name] = "no source gave it"
    last = reading.of("metrics")[-1:]
    values["scrape_ok"] = 1.0 if last and last[0].error is None else 0.0
    if last and last[0].error:
        reasons["scrape_ok"] = last[0].error
    dead = any(e.kind == "engine_death" for e in reading.events)
    health, status = health_of(reading, dead)
    return Signals(engine=reading.name, window_s=window_s, health=health, health_status=status,
                   values=values, reasons=reasons, events=tuple(reading.events), weak=weak)


def is_reachable(reading: EngineReading) -> bool:
    """The doctor could read the engine's /metrics (a hung /metrics counts as unreachable)."""
    return reading.last_ok("metrics") is not None


def describe(reading: EngineReading, signals: Signals, detection: Detection) -> dict[str, Any]:
    """The per-engine object of the report."""
    return {
        "name": reading.name,
        "role": reading.role,
        "url": reading.url,
        "reachable": is_reachable(reading),
        "version": detection.version,
        "version_profile": detection.profile,
        "version_detection": detection.reason,
        "engine_generation": detection.engine_generation,
        "signals": signals.to_dict(),
        "events": [e.to_dict() for e in signals.events],
        "errors": reading.errors() + ([f"metrics: {signals.reasons['bad_readings']}"]
                                      if "bad_readings" in signals.reasons else []),
    }


def merge_events(events: Sequence[Event], limit: int = 200) -> list[Event]:
    """Newest last, bounded."""
    return sorted(events, key=lambda e: e.timestamp)[-limit:]
