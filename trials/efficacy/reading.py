"""The efficacy harness's reading of the virtual-time engines (moved from doctor/accuracy.py as it was).

It reads the harness's engines in-process instead of through the doctor's own reading (doctor.reading), and
keeps its history in memory instead of the state directory's SignalHistory: the efficacy half of issue #13
replaces it with doctor.cycle.run_cycle over substituted I/O, as trials.accuracy already does; until then it
lives here, with the efficacy harness that still uses it, and nowhere in doctor/.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from collectors.combine import EngineReading, build_signals
from collectors.gpu import DcgmSource, GpuReader, engine_fb_bytes, gpu_signals
from collectors.logs import parse_line, parse_stats, recognize
from collectors.scrape import ScrapeError, parse_metrics
from collectors.types import EngineConfigView, Event, MetricsSnapshot, Sample, Signals
from collectors.window import window_chain
from sim.args import parse_engine_args
from sim.harness import HarnessEngine
from sim.scenarios import Scenario
from trials.scenario import ScenarioHarness

LOG_WINDOW_S = 300.0  # diagnose scans the log back this far (at least)
COLLAPSE_S = 10.0  # repeats of one incident within this long are one event (as collectors.logs.scan_file)
_COLLAPSE = {"engine_death", "cuda_oom", "startup_oom", "nccl_error", "model_timeout"}
REFUSED = "connection refused or host unreachable"


class MemoryHistory:
    """Per-engine (time, signals) rows; `view(engine, now)` is the playbooks' HistoryView."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[float, dict[str, float]]]] = {}

    def append(self, engine: str, t: float, values: Mapping[str, float | None]) -> None:
        kept = {k: float(v) for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        self.rows.setdefault(engine, []).append((t, kept))

    def view(self, engine: str, now: float) -> _EngineHistory:
        return _EngineHistory(self.rows.get(engine, []), now)


@dataclass
class _EngineHistory:
    rows: list[tuple[float, dict[str, float]]]
    now: float

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        cutoff = self.now - since_s
        return [(t, v[signal]) for t, v in self.rows if cutoff <= t <= self.now and signal in v]

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        lo, hi = self.now - window_s, self.now - exclude_recent_s
        vals = [v[signal] for t, v in self.rows if lo <= t < hi and signal in v]
        return statistics.median(vals) if vals else None


@dataclass
class _Watch:
    """What the doctor keeps about one engine between evaluations."""

    name: str
    role: str
    config: EngineConfigView
    engine: HarnessEngine | None = None
    offset: int = 0
    events: list[Event] = field(default_factory=list)
    prev_metrics: Sample | None = None
    fb_baseline: float | None = None
    snapshots: list[MetricsSnapshot] = field(default_factory=list)  # what a state directory keeps for cron runs


def _config_from_argv(argv: Sequence[str], env: Mapping[str, str]) -> EngineConfigView:
    """The limits the doctor's config declares for an engine (doctor.toml carries the engine's flags)."""
    config, _ = parse_engine_args(list(argv), env=dict(env))
    return EngineConfigView(max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens,
                            max_model_len=config.max_model_len, gpu_memory_utilization=config.gpu_memory_utilization)


class Observer:
    """Builds each evaluation's EngineReadings from a harness, as `doctor diagnose` reads live engines."""

    def __init__(self, h: ScenarioHarness, scenario: Scenario) -> None:
        self.h = h
        self.year = datetime.fromtimestamp(h.start, UTC).year
        self.watches = {e.name: _Watch(e.name, e.role, _config_from_argv(e.argv, e.env)) for e in scenario.engines}
        for w in self.watches.values():
            w.prev_metrics = self._metrics(w.name)
            if w.prev_metrics.metrics is not None:
                w.snapshots.append(w.prev_metrics.metrics)

    def read_signals(self, window_s: float, history: MemoryHistory, *, long_prompt_tokens: int,
                     judge_s: float = 60.0) -> tuple[list[EngineReading], dict[str, Signals]]:
        """One diagnose run's readings and signals, judged over `judge_s` from the snapshots earlier runs kept
        (collectors.window, as the state directory's snapshot store gives cron runs); the signals of engines
        whose /metrics answered go to `history`."""
        now = self.h.now
        readings = self.read(window_s)
        signals: dict[str, Signals] = {}
        for r in readings:
            chain = self._chain(r, judge_s)
            signals[r.name] = build_signals(r, window_s=window_s, long_prompt_tokens=long_prompt_tokens, chain=chain)
            if r.last_ok("metrics") is not None:
                history.append(r.name, now, signals[r.name].values)
        return readings, signals

    def _chain(self, reading: EngineReading, judge_s: float) -> list[MetricsSnapshot] | None:
        w = self.watches.get(reading.name)
        cur = reading.last_ok("metrics")
        if w is None or cur is None or cur.metrics is None:
            return None
        chain = window_chain(w.snapshots, cur.metrics, judge_s)
        w.snapshots = [*(s for s in w.snapshots if s.timestamp >= cur.metrics.timestamp - 4 * judge_s), cur.metrics]
        return chain

    def watch(self, name: str, role: str | None, argv: Sequence[str], env: dict[str, str], fresh: bool) -> None:
        """Follow a relaunch (new flags) or a new replica (a new engine to read); `fresh`: a new process, so its
        memory baseline starts again. No command line: the engine was removed (a replica scaled in), so it is no
        longer read (as the deployment's config would drop it), instead of being reported down."""
        if not argv:
            self.watches.pop(name, None)
            return
        w = self.watches.get(name)
        if w is None:
            w = self.watches[name] = _Watch(name, role or "", _config_from_argv(argv, env))
            w.prev_metrics = self._metrics(name)
            if w.prev_metrics.metrics is not None:
                w.snapshots.append(w.prev_metrics.metrics)
        else:
            w.config = _config_from_argv(argv, env)
        if fresh:
            w.fb_baseline = None
            w.snapshots = []

    def _metrics(self, name: str) -> Sample:
        t = self.h.now
        if self.h.shut_down(name):
            return Sample("metrics", name, t, error=f"/metrics: {REFUSED}")
        try:
            return Sample("metrics", name, t, metrics=parse_metrics(self.h.metrics_text(name), t))
        except ScrapeError as exc:
            return Sample("metrics", name, t, error=f"/metrics could not be parsed: {exc}")

    def _follow_logs(self, w: _Watch) -> None:
        engine = self.h.engines[w.name]
        if engine is not w.engine:  # a restarted engine appends to the same log file
            w.engine, w.offset = engine, 0
        lines = engine.logs[w.offset:]
        w.offset = len(engine.logs)
        last_ts = self.h.now
        last_seen: dict[str, float] = {}
        for e in w.events[-20:]:
            last_seen[e.kind] = e.timestamp
        for text in lines:
            p = parse_line(text, year=self.year, tz=UTC)
            if p is None or p.kind == "access":
                continue
            if p.timestamp is not None:
                last_ts = p.timestamp
            if p.kind in ("vllm", "json") and parse_stats(p.message) is not None:
                continue
            ev = recognize(p, w.name, fallback_ts=last_ts)
            if ev is None:
                continue
            if ev.kind in _COLLAPSE:
                prev = last_seen.get(ev.kind)
                last_seen[ev.kind] = ev.timestamp
                if prev is not None and abs(ev.timestamp - prev) <= COLLAPSE_S:
                    continue
            w.events.append(ev)

    def _gpu(self, w: _Watch, reading: EngineReading) -> None:
        text = self.h.gpu_text(w.name)
        source = DcgmSource(f"sim://{w.name}/dcgm", lambda _url: text)
        readings, why = GpuReader(source, reading.errors_extra.append).read(None)
        if why:
            reading.gpu_reasons = {"dram_utilization": why}
            return
        baseline = w.fb_baseline
        if baseline is None:
            w.fb_baseline = engine_fb_bytes(readings)
        values, reasons = gpu_signals(readings, baseline_fb_bytes=baseline)
        reading.gpu_values, reading.gpu_reasons = values, reasons

    def read(self, window_s: float) -> list[EngineReading]:
        """One diagnose run over the window that ends now."""
        out = []
        now = self.h.now
        for w in self.watches.values():
            reading = EngineReading(w.name, w.role, f"sim://{w.name}", config=w.config)
            cur = self._metrics(w.name)
            if cur.error is None and w.prev_metrics is not None and w.prev_metrics.error is None:
                reading.samples.append(w.prev_metrics)
            reading.samples.append(cur)
            w.prev_metrics = cur
            if self.h.shut_down(w.name):
                for source in ("health", "version"):
                    reading.samples.append(Sample(source, w.name, now, error=f"/{source}: {REFUSED}"))
            else:
                core = self.h.engines[w.name].core
                reading.samples.append(Sample("health", w.name, now, data={"status": self.h.health(w.name),
                                                                           "latency_s": 0.001}))
                reading.samples.append(Sample("version", w.name, now, data={"version": core.profile.version}))
                reading.samples.append(Sample("models", w.name, now, data={
                    "model": core.config.served_model_name, "max_model_len": core.config.max_model_len}))
            self._follow_logs(w)
            since = now - max(window_s, LOG_WINDOW_S)
            reading.events.extend(e for e in w.events if e.timestamp >= since)
            self._gpu(w, reading)
            out.append(reading)
        return out


def history_at(history: MemoryHistory, now: float, engine: str) -> _EngineHistory:
    """`history` as the playbooks see it at `now` (the partial that build_views takes as history_for)."""
    return history.view(engine, now)
