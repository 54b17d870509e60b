"""The scenario harness the trials run in: `sim.harness.Harness` with a scenario's timeline (faults and
restarts at their virtual times), the deployment's warm-up, and the doctor's settings for a scenario."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from doctor.pipeline import DefaultSettings
from doctor.rules import load_playbooks
from playbooks.base import Playbook
from sim.args import parse_engine_args
from sim.engine_cli import DEATH_SHUTDOWN_DELAY_S
from sim.faults import parse_fault
from sim.harness import Harness, HarnessEngine
from sim.scenarios import Incident
from sim.workload import RequestSpec

WARMUP_BATCHES = (4, 8, 16)  # the seed's warm-up: batch 4/8/16 x 512/1024/2048 prompt tokens
WARMUP_PROMPTS = (512, 1024, 2048)
WARMUP_OUTPUT_TOKENS = 16
WARMUP_S = 60.0  # engines start and warm up this long before the scenario's t=0


class ScenarioHarness(Harness):
    """`sim.harness.Harness` plus scheduled callbacks, engine restarts and death times.

    `restart_engine` replaces an engine by a fresh one with the same arguments at the current virtual
    time, as an operator's restart without warm-up: the old core stops (its in-flight requests fail),
    frees its GPUs, and the new engine starts with empty caches and no batch-size class seen yet.
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

    def add_engine(self, name: str, argv: list[str], *, env: dict[str, str] | None = None,
                   **kw: bool) -> HarnessEngine:
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


def engine_config(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, int | float]:
    """The limits the doctor's config declares for an engine (doctor.toml carries the engine's flags), as
    `doctor.config.EngineConfig.ref()` hands them to the reading."""
    config, _ = parse_engine_args(list(argv), env=dict(env))
    values = {"max_num_seqs": config.max_num_seqs, "max_num_batched_tokens": config.max_num_batched_tokens,
              "max_model_len": config.max_model_len}
    return {k: int(v) for k, v in values.items() if v is not None}
