"""In-process engines on one virtual clock: minutes of serving in seconds, with no HTTP and no sleeps.

A `Harness` holds named engines (typically `hot` and `cold`), feeds them workload requests at their
arrival times, and steps every engine as a discrete-event simulation. Tests read the same surfaces
a real deployment offers: `metrics_text(name)` (the /metrics body), `log_lines(name)` (timestamped
log lines) and `gpu_text(name)` (dcgm-exporter), plus the client-side view of every request.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sim.args import parse_engine_args
from sim.engine import EngineCore, Step
from sim.exposition import render_metrics
from sim.gpu import MemoryLedger, render_dcgm
from sim.request import SimRequest, SyntheticPrompt
from sim.runtime import EngineRuntime
from sim.workload import RequestSpec

EPOCH = 1_790_000_000.0  # virtual clock start (unix seconds), fixed so runs are byte-identical


@dataclass
class ClientRecord:
    """What a client saw for one request (the load generator's view)."""

    engine: str
    spec: RequestSpec
    sent: float
    first_token: float | None = None
    finished: float | None = None
    tokens: int = 0
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def e2e(self) -> float | None:
        return None if self.finished is None else self.finished - self.sent


@dataclass
class HarnessEngine:
    """One engine in the harness and its driver state."""

    name: str
    runtime: EngineRuntime
    logs: list[str]
    step: Step | None = None
    step_event: int | None = None

    @property
    def core(self) -> EngineCore:
        return self.runtime.core


Router = Callable[[RequestSpec], str]


def length_router(threshold: int = 5120, hot: str = "hot", cold: str = "cold") -> Router:
    """Prompts below the threshold go hot, the rest cold (the deployment's split)."""
    return lambda spec: cold if spec.prompt_tokens >= threshold else hot


class Harness:
    """A discrete-event loop over engines and request arrivals."""

    def __init__(self, *, start: float = EPOCH, seed: int = 0) -> None:
        self.now = start
        self.start = start
        self.seed = seed
        self.ledger = MemoryLedger()
        self.engines: dict[str, HarnessEngine] = {}
        self.records: list[ClientRecord] = []
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._ids = itertools.count()

    # ----- set-up -------------------------------------------------------------------------------

    def add_engine(self, name: str, argv: list[str], *, env: dict[str, str] | None = None,
                   starting: bool = False) -> HarnessEngine:
        """An engine from `vllm serve`-style arguments (sim flags included). By default it is already up: its
        process started its modelled start-up (`core.startup`) ago and it serves now. With `starting` its
        process starts now (a launch or relaunch): connections are refused until `core.ready_at`, and its
        start-up lines are written as their times come."""
        config, options = parse_engine_args(argv, env=env or {})
        core = EngineCore(config, options.preset, options.profile, now=self.now, ledger=self.ledger,
                          owner=name, faults=options.faults, ready=not starting)
        logs: list[str] = []
        runtime = EngineRuntime(core, logs.extend, host=options.host, port=options.port,
                                dev_mode=options.dev_mode, non_default_args=options.non_default_args,
                                api_pid=1000 + 10 * len(self.engines), stats_interval_s=options.stats_interval_s)
        for t, lines in runtime.start(self.now):
            if t <= self.now:
                logs.extend(lines)
            else:
                self._at(t, functools.partial(logs.extend, lines))
        engine = HarnessEngine(name, runtime, logs)
        self.engines[name] = engine
        self._arm_timer(engine)
        return engine

    def _at(self, t: float, fn: Callable[[], None]) -> int:
        seq = next(self._seq)
        heapq.heappush(self._events, (t, seq, fn))
        return seq

    def _arm_timer(self, engine: HarnessEngine) -> None:
        deadline = engine.runtime.next_deadline()

        def fire() -> None:
            engine.runtime.tick(self.now)
            self._kick(engine)
            if not engine.core.dead:
                self._arm_timer(engine)

        self._at(max(deadline, self.now), fire)

    # ----- load ---------------------------------------------------------------------------------

    def submit(self, engine_name: str, spec: RequestSpec, *, at: float | None = None,
               ignore_eos: bool = True) -> ClientRecord:
        """Send one request at `at` (default: start + spec.arrival_s)."""
        sent = self.start + spec.arrival_s if at is None else at
        record = ClientRecord(engine_name, spec, sent)
        self.records.append(record)
        self._at(sent, lambda: self._arrive(record, ignore_eos))
        return record

    def load(self, specs: Iterable[RequestSpec], *, router: Router | None = None, offset_s: float = 0.0,
             ignore_eos: bool = True) -> list[ClientRecord]:
        """Send a workload; with several engines a router picks one per request."""
        route = router or (lambda _spec: next(iter(self.engines)))
        return [self.submit(route(s), s, at=self.start + offset_s + s.arrival_s, ignore_eos=ignore_eos)
                for s in specs]

    def _arrive(self, record: ClientRecord, ignore_eos: bool) -> None:
        engine = self.engines[record.engine]
        core = engine.core
        spec = record.spec
        if core.dead or not self.listening(record.engine):
            record.error = "connection refused"
            record.finished = self.now
            return
        if spec.prompt_tokens + spec.output_tokens > core.config.max_model_len:
            record.error = "400 context length exceeded"
            record.finished = self.now
            return
        prompt = SyntheticPrompt(spec.prompt_tokens, unique_key=self.seed * 1_000_003 + spec.index + 1,
                                 prefix_key=spec.prefix_group, prefix_len=spec.prefix_tokens)
        target = spec.output_tokens if ignore_eos else core.sample_output_len()

        def listener(req: SimRequest, new_tokens: int, now: float) -> None:
            if new_tokens:
                if record.first_token is None:
                    record.first_token = now
                record.tokens += new_tokens
                record.token_times.append(now)
            if req.finish_reason is not None:
                record.finished = now
                record.finish_reason = req.finish_reason
                record.error = req.error

        req = SimRequest(f"cmpl-{next(self._ids)}", prompt, max_tokens=spec.output_tokens,
                         target_output=target, arrival_time=self.now, priority=spec.priority,
                         output_seed=spec.index, listener=listener)
        delay = core.frontend_delay(spec.prompt_tokens)

        def reach_core() -> None:
            if core.dead:
                record.error = "500 engine dead"
                record.finished = self.now
                return
            core.add_request(req, self.now)
            self._kick(engine)

        self._at(self.now + delay, reach_core)

    # ----- stepping -----------------------------------------------------------------------------

    def _kick(self, engine: HarnessEngine) -> None:
        """Start a step if the engine is idle and has work."""
        if engine.step is not None:
            return
        step = engine.core.schedule(self.now)
        if step is None:
            return
        engine.step = step

        def done() -> None:
            engine.step = None
            engine.core.complete(step, self.now)
            self._kick(engine)

        self._at(step.end, done)

    def run_until(self, t: float) -> None:
        """Process every event up to virtual time `t`."""
        while self._events and self._events[0][0] <= t:
            when, _, fn = heapq.heappop(self._events)
            self.now = max(self.now, when)
            fn()
        self.now = max(self.now, t)

    def run_for(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    def drain(self, limit_s: float = 3600.0) -> None:
        """Run until every submitted request has finished (or the limit passes)."""
        end = self.now + limit_s
        while any(r.finished is None for r in self.records) and self._events and self.now < end:
            self.run_until(min(end, self._events[0][0]))

    # ----- surfaces -----------------------------------------------------------------------------

    def metrics_text(self, name: str) -> str:
        """The engine's /metrics body now."""
        engine = self.engines[name]
        core = engine.core
        return render_metrics(core.profile, core.metrics, model_name=core.config.served_model_name,
                              stats_enabled=not core.config.disable_log_stats).decode()

    def log_lines(self, name: str) -> list[str]:
        return list(self.engines[name].logs)

    def gpu_text(self, name: str) -> str:
        """dcgm-exporter text for the engine's GPUs now."""
        return render_dcgm(self.engines[name].core.gpu_readings(self.now))

    def listening(self, name: str) -> bool:
        """The engine's API server accepts connections (its start-up is over)."""
        return self.now >= self.engines[name].core.ready_at

    def health(self, name: str) -> int:
        """The status code /health would answer (once `listening`)."""
        core = self.engines[name].core
        return core.profile.health_dead_status if core.dead else 200
