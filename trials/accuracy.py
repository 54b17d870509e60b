"""Detection accuracy: run an incident scenario in virtual time and judge it with the doctor's own cycle.

`run_in_harness(scenario, seed=...)` starts the scenario's hot and cold engines in a `ScenarioHarness`, sends
its workload routed by prompt length, applies the incident timeline at its virtual times, and every
`eval_every_s` runs `doctor.cycle.run_cycle`, the cycle `doctor diagnose` runs, with only its I/O substituted:

- the engines are `EngineRef`s named `http://<engine>.sim` (trials.sim_io), read over the `SimNetwork`'s
  `httpx.MockTransport`, which answers
  /metrics, /health, /version, /v1/models from the harness (404 for /server_info, as vLLM without dev mode),
  and refuses the connection once the engine's API server would have exited (`ScenarioHarness.shut_down`);
  each engine's dcgm-exporter (`http://<engine>.dcgm.sim/metrics`) answers `h.gpu_text`;
- each engine logs to a file in a temporary directory: the lines the engine printed are appended before each
  cycle and after its wait between reads (and the file's mtime set to virtual time, as a live file's would
  be), and the reading scans it as `--log` does;
- the state directory is a temporary one, so history, window snapshots and the playbooks' `for` state are the
  real SignalHistory, SnapshotStore and StateDir;
- the clock is the harness's virtual clock, and the wait between the two reads of each engine advances it.

A cycle starts `sample_s` before each evaluation time, so its second read (the one its report is stamped
with) falls on it. The result records the findings timeline, when the expected playbook first fired (delay
from the symptom onset), its first remedies and every warning or critical finding that is not the incident.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import time
from pathlib import Path

from doctor.cycle import run_cycle
from doctor.engines import EngineRef, Role
from doctor.plan import Plan
from sim.scenarios import Scenario
from trials.accuracy_result import Evaluation, FalsePositive, ScenarioResult
from trials.scenario import (
    WARMUP_S,
    ScenarioHarness,
    ScenarioSettings,
    available_playbooks,
    engine_config,
)
from trials.sim_io import LogFiles, SimNetwork, dcgm_url, engine_url

__all__ = ["WARMUP_S", "Evaluation", "FalsePositive", "ScenarioHarness", "ScenarioResult", "run_in_harness"]

SAMPLE_S = 5.0  # between a cycle's two reads of each engine (doctor diagnose's --sample default)

def _role(role: str) -> Role | None:
    return "hot" if role == "hot" else "cold" if role == "cold" else None


def plan_for(h: ScenarioHarness, scenario: Scenario, state_dir: Path, logs: LogFiles, *,
             sample_s: float) -> Plan:
    """The plan a deployment's doctor.toml would give for the scenario's engines, with the harness as its I/O."""
    engines = tuple(EngineRef(name=e.name, role=_role(e.role), url=engine_url(e.name), log=str(logs.path(e.name)),
                              dcgm=dcgm_url(e.name), config=engine_config(e.argv, e.env))
                    for e in scenario.engines)
    net = SimNetwork(h)
    for e in scenario.engines:
        net.register(engine_url(e.name), e.name)

    async def sleep(seconds: float) -> None:
        h.run_until(h.now + seconds)
        logs.append()  # what the engines printed meanwhile is in their files when the cycle scans them

    return Plan(engines=engines, state_dir=state_dir, settings=ScenarioSettings(scenario.templates_on),
                sample_s=sample_s, long_prompt_tokens=scenario.route_threshold, transport=net.transport(),
                sync_transport=net.sync_transport(), sleep=sleep)


def run_in_harness(scenario: Scenario, *, seed: int = 0, eval_every_s: float = 30.0,
                   duration_s: float | None = None, warmup: bool = True) -> ScenarioResult:
    """Run `scenario` in virtual time and run the doctor's cycle every `eval_every_s`.

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
    _, missing = available_playbooks()
    sample_s = min(SAMPLE_S, eval_every_s / 2)
    with tempfile.TemporaryDirectory(prefix="doctor-accuracy-") as tmp:
        (Path(tmp) / "logs").mkdir()
        logs = LogFiles(h, Path(tmp) / "logs")
        plan = plan_for(h, scenario, Path(tmp) / "state", logs, sample_s=sample_s)
        evaluations = asyncio.run(_evaluate(h, plan, logs, t0=t0, every_s=eval_every_s, duration_s=duration))
    return ScenarioResult(scenario, seed, evaluations, missing, wall_s=time.perf_counter() - wall0)


async def _evaluate(h: ScenarioHarness, plan: Plan, logs: LogFiles, *, t0: float, every_s: float,
                    duration_s: float) -> list[Evaluation]:
    evaluations: list[Evaluation] = []
    k = 1
    while k * every_s <= duration_s + 1e-9:
        h.run_until(t0 + k * every_s - plan.sample_s)
        logs.append()
        result = await run_cycle(plan, clock=lambda: h.now)
        evaluations.append(Evaluation(h.now - t0, result.findings, result.signals))
        k += 1
    return evaluations
