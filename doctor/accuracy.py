"""Detection accuracy: run an incident scenario in virtual time and judge it the way `doctor diagnose` would.

`run_in_harness(scenario, seed=...)` starts the scenario's hot and cold engines in `sim.harness`, sends
its workload routed by prompt length, applies the incident timeline at its virtual times, and every
`eval_every_s` builds the doctor's view from the engines' surfaces exactly as a diagnose run does:
/metrics parsed into snapshots (the previous evaluation's snapshot opens the window), /health and
/version, log lines parsed into events (the last max(window, 300) s, as `--log` scans), dcgm-exporter
text read through `collectors.gpu.DcgmSource` with the first framebuffer reading as the baseline,
then `collectors.combine.build_signals`, `doctor.pipeline.build_views` (over an in-memory history of
the signals recorded so far) and the playbooks with persistent `for`/hysteresis state. The result
records the findings timeline, when the expected playbook first fired (delay from the symptom onset),
its first remedies and every warning or critical finding that is not part of the incident.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from collectors.combine import EngineReading, build_signals
from collectors.gpu import DcgmSource, GpuReader, engine_fb_bytes, gpu_signals
from collectors.logs import parse_line, parse_stats, recognize
from collectors.scrape import ScrapeError, parse_metrics
from collectors.types import EngineConfigView, Event, MetricsSnapshot, Sample, Signals
from collectors.window import window_chain
from doctor.pipeline import DefaultSettings, build_views, run_playbooks
from doctor.rules import load_playbooks
from playbooks.base import Playbook
from playbooks.evaluate import evaluate
from playbooks.model import Finding
from sim.args import parse_engine_args
from sim.engine_cli import DEATH_SHUTDOWN_DELAY_S
from sim.faults import parse_fault
from sim.harness import Harness, HarnessEngine
from sim.scenarios import Incident, Scenario
from sim.workload import RequestSpec

LOG_WINDOW_S = 300.0  # diagnose scans the log back this far (at least)
COLLAPSE_S = 10.0  # repeats of one incident within this long are one event (as collectors.logs.scan_file)
_COLLAPSE = {"engine_death", "cuda_oom", "startup_oom", "nccl_error", "model_timeout"}
REFUSED = "connection refused or host unreachable"
WARMUP_BATCHES = (4, 8, 16)  # the seed's warm-up: batch 4/8/16 x 512/1024/2048 prompt tokens
WARMUP_PROMPTS = (512, 1024, 2048)
WARMUP_OUTPUT_TOKENS = 16
WARMUP_S = 60.0  # engines start and warm up this long before the scenario's t=0


# ----- the harness, with what a scenario needs beyond sim.harness -------------------------------------------


class ScenarioHarness(Harness):
    """`sim.harness.Harness` plus scheduled callbacks, engine restarts and death times.

    `restart_engine` replaces an engine by a fresh one with the same arguments at the current virtual time, as an
    operator's restart without warm-up: the old core stops (its in-flight requests fail), frees its GPUs, and the new
    engine serves at once (start-up taken as paid: issue 12's windows) with empty caches and no batch-size class seen.
    A watchdog every second notes when an engine died, so reads can turn into "connection refused"
    once vLLM's API server would have exited (DEATH_SHUTDOWN_DELAY_S after the engine core died).
    """

    def __init__(self, *, seed: int = 0, watch_every_s: float = 1.0) -> None:
        super().__init__(seed=seed)
        self.died_at: dict[str, float] = {}
        self.argv: dict[str, tuple[list[str], dict[str, str]]] = {}
        self.watch_every_s = watch_every_s
        self._warmups = 0
        self._at(self.now + watch_every_s, self._watch)

    def add_engine(self, name: str, argv: list[str], *, env: dict[str, str] | None = None, **kw: bool) -> HarnessEngine:
        self.argv[name] = (list(argv), dict(env or {}))
        self.died_at.pop(name, None)
        return super().add_engine(name, argv, env=env, **kw)  # starting=True: a relaunch in its start-up

    def schedule(self, at: float, fn: Callable[[], None]) -> None:
        """Call `fn()` at virtual time `at`."""
        self._at(at, fn)

    def restart_engine(self, name: str) -> HarnessEngine:
        old = self.engines[name]
        if not old.core.dead:
            old.core.kill(self.now, "restarted")
        old.core.release_gpus()
        argv, env = self.argv[name]
        return self.add_engine(name, argv, env=env)

    def warm_up(self, name: str, *, at: float, batches: Sequence[int] = WARMUP_BATCHES,
                prompt_tokens: Sequence[int] = WARMUP_PROMPTS, every_s: float = 2.0) -> float:
        """The deployment's warm-up after a start: groups of `batch` requests of each prompt length, sent
        together `every_s` apart (batches above the engine's max_num_seqs are capped). Returns the time the
        last group is sent. Warm-up requests have negative indices (distinct prompts, none shared with the load)."""
        cap = self.engines[name].core.config.max_num_seqs
        t = at
        for batch in dict.fromkeys(min(b, cap) for b in batches):
            for tokens in prompt_tokens:
                for _ in range(batch):
                    self._warmups += 1
                    self.submit(name, RequestSpec(-1 - self._warmups, 0.0, tokens, WARMUP_OUTPUT_TOKENS, False), at=t)
                t += every_s
        return t

    def _watch(self) -> None:
        for name, engine in self.engines.items():
            if engine.core.dead and name not in self.died_at:
                self.died_at[name] = self.now
        self._at(self.now + self.watch_every_s, self._watch)

    def shut_down(self, name: str) -> bool:
        """Reads are refused: the engine died long enough ago (its API server is gone), or it is still starting."""
        t = self.died_at.get(name)
        return (t is not None and self.now - t >= DEATH_SHUTDOWN_DELAY_S) or not self.listening(name)

    def apply(self, incident: Incident) -> None:
        """Make a timeline entry happen now."""
        if incident.kind == "fault":
            engine = self.engines[incident.engine]
            engine.runtime.apply_fault(parse_fault(incident.spec), self.now)
            if engine.core.dead and incident.engine not in self.died_at:
                self.died_at[incident.engine] = self.now
            self._kick(engine)
        elif incident.kind == "restart":
            self.restart_engine(incident.engine)


# ----- an in-memory signal history (what the state directory holds for cron runs) ---------------------------


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


# ----- settings --------------------------------------------------------------------------------------------


class ScenarioSettings(DefaultSettings):
    """Seed thresholds; templates configured where the scenario says so; no SLOs."""

    def __init__(self, templates_on: Sequence[str] = ()) -> None:
        self._templates = set(templates_on)

    def templates_configured(self, engine: str) -> bool:
        return engine in self._templates


def available_playbooks() -> tuple[list[Playbook], list[str]]:
    """The registered playbooks whose modules exist (in precedence order), and the ids still missing."""
    found, missing = load_playbooks()
    return list(found.values()), missing


# ----- reading one engine the way diagnose does ------------------------------------------------------------


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


# ----- results ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FalsePositive:
    t_s: float
    playbook: str
    engine: str
    severity: str
    summary: str


@dataclass
class Evaluation:
    """One diagnose run during the scenario (t_s: seconds since the scenario started)."""

    t_s: float
    findings: list[Finding]
    signals: dict[str, Signals]


@dataclass
class ScenarioResult:
    scenario: Scenario
    seed: int
    evaluations: list[Evaluation]
    missing_playbooks: list[str]
    wall_s: float = 0.0

    @property
    def onset_s(self) -> float | None:
        return self.scenario.onset_s

    def _expected(self, f: Finding) -> bool:
        sc = self.scenario
        return f.playbook == sc.expected_playbook and (sc.expected_engine is None or f.engine == sc.expected_engine)

    @property
    def detection(self) -> tuple[float, Finding] | None:
        """The first evaluation at or after onset where the expected playbook fired."""
        sc = self.scenario
        if sc.expected_playbook is None or sc.onset_s is None:
            return None
        for ev in self.evaluations:
            if ev.t_s < sc.onset_s:
                continue
            for f in ev.findings:
                if self._expected(f):
                    return ev.t_s, f
        return None

    @property
    def detected_at_s(self) -> float | None:
        d = self.detection
        return None if d is None else d[0]

    @property
    def detection_delay_s(self) -> float | None:
        d = self.detection
        return None if d is None or self.scenario.onset_s is None else d[0] - self.scenario.onset_s

    @property
    def first_remedies(self) -> tuple[str, ...]:
        d = self.detection
        return () if d is None else tuple(a.kind for a in d[1].remedies)

    @property
    def first_remedy(self) -> str | None:
        kinds = self.first_remedies
        return kinds[0] if kinds else None

    @property
    def fired(self) -> dict[str, float]:
        """Every playbook that fired (any severity, any engine) and when it first did."""
        out: dict[str, float] = {}
        for ev in self.evaluations:
            for f in ev.findings:
                out.setdefault(f.playbook, ev.t_s)
        return out

    @property
    def false_positives(self) -> list[FalsePositive]:
        """Warning or critical findings that are not the incident: other playbooks (except its known
        consequences after onset), or the expected one before the onset."""
        sc = self.scenario
        out = []
        for ev in self.evaluations:
            for f in ev.findings:
                if f.severity == "info":
                    continue
                after_onset = sc.onset_s is not None and ev.t_s >= sc.onset_s
                if after_onset and (self._expected(f) or f.playbook in sc.consequences):
                    continue
                out.append(FalsePositive(ev.t_s, f.playbook, f.engine, f.severity, f.summary))
        return out

    def timeline(self, signals: Sequence[str] = ()) -> str:
        """Findings per evaluation (and chosen signal values), for reports and failing tests."""
        lines = [f"scenario {self.scenario.name} seed {self.seed} onset {self.scenario.onset_s}"]
        for ev in self.evaluations:
            found = ", ".join(f"{f.playbook}/{f.engine}/{f.severity}" for f in ev.findings) or "-"
            lines.append(f"  t={ev.t_s:6.0f}s  {found}")
            for name in signals:
                vals = "  ".join(f"{e}={_fmt(s.values.get(name))}" for e, s in ev.signals.items())
                lines.append(f"           {name}: {vals}")
        return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def history_at(history: MemoryHistory, now: float, engine: str) -> _EngineHistory:
    """`history` as the playbooks see it at `now` (the partial that build_views takes as history_for)."""
    return history.view(engine, now)


# ----- the run ---------------------------------------------------------------------------------------------


def run_in_harness(scenario: Scenario, *, seed: int = 0, eval_every_s: float = 30.0,
                   duration_s: float | None = None, warmup: bool = True) -> ScenarioResult:
    """Run `scenario` in virtual time and evaluate the doctor's pipeline every `eval_every_s`.

    With `warmup` the engines start WARMUP_S before the scenario's t=0 and get the seed's warm-up
    batches, as a deployment does after a start (the doctor starts watching at t=0); without it the
    scenario starts with engines that have just started and pay kernel warm-up on the first requests.
    """
    if eval_every_s <= 0:
        raise ValueError(f"eval_every_s must be > 0, got {eval_every_s}")
    wall0 = time.perf_counter()
    duration = scenario.duration_s if duration_s is None else duration_s
    h = ScenarioHarness(seed=seed)
    for e in scenario.engines:
        h.add_engine(e.name, scenario.argv_for(e.name, seed), env=dict(e.env))
    if warmup:
        for e in scenario.engines:
            h.warm_up(e.name, at=h.start)
        h.run_until(h.start + WARMUP_S)
    t0 = h.now
    h.load(scenario.requests(seed), router=scenario.route, offset_s=t0 - h.start)
    for incident in scenario.timeline:
        if incident.kind in ("fault", "restart"):
            h.schedule(t0 + incident.at_s, functools.partial(h.apply, incident))
    observer = Observer(h, scenario)
    playbooks, missing = available_playbooks()
    settings = ScenarioSettings(scenario.templates_on)
    history = MemoryHistory()
    state: MutableMapping[str, dict[str, Any]] = {}
    evaluations: list[Evaluation] = []
    t_prev = t0
    k = 1
    while k * eval_every_s <= duration + 1e-9:
        now = t0 + k * eval_every_s
        h.run_until(now)
        window = now - t_prev
        readings, signals = observer.read_signals(window, history, long_prompt_tokens=scenario.route_threshold)
        views = build_views(readings, signals, now=now, settings=settings,
                            history_for=functools.partial(history_at, history, now))
        if missing:
            findings = evaluate(views, state, now=now, playbooks=playbooks,
                                params_for=lambda pb, engine: settings.params_for(pb.id, engine))
        else:
            findings = run_playbooks(views, state, now=now, settings=settings)
        evaluations.append(Evaluation(now - t0, findings, signals))
        t_prev = now
        k += 1
    return ScenarioResult(scenario, seed, evaluations, missing, wall_s=time.perf_counter() - wall0)
