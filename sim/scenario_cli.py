"""`doctor sim scenario NAME`: a hot and a cold sim engine on loopback, a workload and an incident timeline.

For people: the engines serve over HTTP in real time (point `doctor diagnose` at the printed URLs while
the incident unfolds). Faults are injected through each engine's `POST /sim/fault` at their times,
restarts replace an engine on the same port, and the workload is sent with `sim.loadgen.run_load`,
routed by prompt length. Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import httpx

from sim.engine_cli import EngineThread
from sim.gpu import MemoryLedger
from sim.loadgen import LoadProgress, run_load
from sim.scenario_config import doctor_toml
from sim.scenarios import MIN_BASELINE_S, SCENARIOS, Incident, Scenario
from sim.timeline_file import expected_of, scenario_phases, write_timeline
from sim.workload import RequestSpec

DEFAULT_BASELINE_S = 90.0  # healthy serving before the incident by default (--baseline for the scenario's long form)
GRACE_S = 5.0  # after the last arrival, requests still in flight get this long before the run ends
WARMUP = ((4, 8, 16), (512, 1024, 2048))  # the seed's warm-up: batch 4/8/16 x 512/1024/2048 prompt tokens


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(f"{self.prog}: error: {message}")


def _baseline(text: str) -> float:
    """--baseline SECONDS: a finite number of seconds, at least a minute."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not MIN_BASELINE_S <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least {MIN_BASELINE_S:g} seconds (a minute of healthy reads "
                                         f"for the doctor), got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="doctor sim scenario", description=(
        "Start a hot and a cold simulated vLLM engine on loopback, send a workload and play an incident "
        "timeline in real time. Point `doctor diagnose` at the printed URLs."))
    p.add_argument("name", nargs="?", help="the scenario (see --list)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--baseline", type=_baseline, default=DEFAULT_BASELINE_S, metavar="SECONDS",
                   help=f"healthy serving before the incident (default {DEFAULT_BASELINE_S:g}: the incident within "
                   "two minutes; 600 or more for the long form the accuracy trials run)")
    p.add_argument("--seconds", type=float, help="run this long (default: the scenario's length)")
    p.add_argument("--port-base", type=int, default=0,
                   help="hot on P, cold on P+1, their dcgm-exporters on P+2 and P+3 (default: free ports)")
    p.add_argument("--seed", type=int, default=0, help="workload and engine seed (default 0)")
    p.add_argument("--log-dir", type=Path, help="where the engines' log files go (default: a new temp dir)")
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up batches before the workload")
    p.add_argument("--sim-startup-scale", type=float, default=1.0,
                   help="the engines' start-up, as a share of the modelled one (default 1; 0 = serve at once)")
    return p


def list_scenarios(out: TextIO, baseline_s: float = DEFAULT_BASELINE_S) -> None:
    width = max(len(n) for n in SCENARIOS)
    for name, catalogued in SCENARIOS.items():
        sc = catalogued.with_baseline(baseline_s)
        expected = f" -> {sc.expected_playbook} ({sc.expected_remedy})" if sc.expected_playbook else ""
        onset = f", incident at t={sc.onset_s:g}s" if sc.onset_s is not None else ""
        print(f"{name:<{width}}  {sc.duration_s:>5.0f}s{onset}{expected}", file=out)
        print(f"{'':<{width}}  {sc.description}", file=out)


class Deployment:
    """The two engines of a scenario, served from background threads on one simulated node."""

    def __init__(self, scenario: Scenario, *, seed: int, port_base: int, log_dir: Path,
                 startup_scale: float = 1.0) -> None:
        self.scenario = scenario
        self.startup_scale = startup_scale
        self.seed = seed
        self.log_dir = log_dir
        self.ledger = MemoryLedger()
        self.ports: dict[str, tuple[int, int]] = {}
        for i, e in enumerate(scenario.engines):
            self.ports[e.name] = (port_base + i, port_base + 2 + i) if port_base else (0, 0)
        self.engines: dict[str, EngineThread] = {}

    def _argv(self, name: str) -> list[str]:
        port, dcgm = self.ports[name]
        return [*self.scenario.argv_for(name, self.seed), "--host", "127.0.0.1", "--port", str(port),
                "--dcgm-port", str(dcgm), "--sim-fault-endpoint", "--log-file", str(self.log(name)),
                "--sim-startup-scale", str(self.startup_scale)]

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, name: str) -> EngineThread:
        return self._ready(name, self._launch(name))

    def _launch(self, name: str) -> EngineThread:
        return EngineThread(self._argv(name), env=dict(self.scenario.engine(name).env), ledger=self.ledger).launch()

    def _ready(self, name: str, engine: EngineThread) -> EngineThread:
        engine.wait_ready()
        assert engine.handle is not None
        # A restart must come back on the same ports (the router and the doctor know the engine by URL).
        self.ports[name] = (engine.handle.port, engine.handle.dcgm_port or 0)
        self.engines[name] = engine
        return engine

    def start_all(self) -> None:
        """Launch every engine, then wait for each: their start-ups run side by side, as on separate GPUs."""
        launched = {e.name: self._launch(e.name) for e in self.scenario.engines}
        for name, engine in launched.items():
            self._ready(name, engine)

    def url(self, name: str) -> str:
        return self.engines[name].url

    def dcgm_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name][1]}/metrics"

    def stop_all(self) -> None:
        for engine in self.engines.values():
            with contextlib.suppress(Exception):
                engine.stop()


async def _apply(dep: Deployment, incident: Incident, say: Callable[[str], None]) -> None:
    if incident.kind == "fault":
        async with httpx.AsyncClient(trust_env=False, timeout=10.0) as client:
            try:
                r = await client.post(dep.url(incident.engine) + "/sim/fault", json={"fault": incident.spec})
                say(f"{incident.describe()}: HTTP {r.status_code}")
            except httpx.HTTPError as exc:
                say(f"{incident.describe()}: could not inject ({type(exc).__name__}: {exc})")
    elif incident.kind == "restart":
        old = dep.engines[incident.engine]
        await asyncio.to_thread(old.stop)
        await asyncio.to_thread(dep.start, incident.engine)
        say(f"{incident.describe()}: {incident.engine} is back at {dep.url(incident.engine)}")
    else:
        say(incident.describe())


async def _timeline(dep: Deployment, incidents: list[Incident], t0: float, say: Callable[[str], None]) -> None:
    for incident in sorted(incidents, key=lambda i: i.at_s):
        delay = t0 + incident.at_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await _apply(dep, incident, say)


def _warmup_requests(max_num_seqs: int) -> list[RequestSpec]:
    out: list[RequestSpec] = []
    t = 0.0
    batches, lengths = WARMUP
    for batch in dict.fromkeys(min(b, max_num_seqs) for b in batches):
        for tokens in lengths:
            out += [RequestSpec(1_000_000 + len(out), t, tokens, 16, False) for _ in range(batch)]
            t += 2.0
    return out


async def run_scenario(dep: Deployment, seconds: float, *, warmup: bool, say: Callable[[str], None],
                       timeline_file: Path | None = None) -> dict[str, LoadProgress]:
    """Warm up, then play the workload and the timeline for `seconds`; returns the load progress per engine."""
    sc = dep.scenario
    if warmup:
        say("warming up (batch 4/8/16 x 512/1024/2048 prompt tokens)")
        await asyncio.gather(*(run_load(dep.url(e.name), _warmup_requests(
            dep.engines[e.name].config.max_num_seqs), seed=dep.seed) for e in sc.engines))
    requests = [r for r in sc.with_duration(seconds).requests(dep.seed)]
    routed: dict[str, list[RequestSpec]] = {e.name: [] for e in sc.engines}
    for r in requests:
        routed[sc.route(r)].append(r)
    progress: dict[str, LoadProgress] = {}

    def keep(name: str) -> Callable[[LoadProgress], None]:
        def store(p: LoadProgress) -> None:
            progress[name] = p
        return store

    say(f"t=0s: workload starts ({len(requests)} requests over {seconds:g}s)")
    t0 = time.monotonic()
    if timeline_file is not None:
        write_timeline(timeline_file, name=sc.name, description=sc.description, started_at=time.time(),
                       phases=scenario_phases(sc), end_s=seconds, expected=expected_of(sc))
    timeline = [i for i in sc.timeline if i.kind != "standing" and i.at_s < seconds]
    tasks: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(run_load(dep.url(name), reqs, seed=dep.seed, progress=keep(name),
                                       progress_interval_s=1.0))
        for name, reqs in routed.items() if reqs]
    tasks.append(asyncio.ensure_future(_timeline(dep, timeline, t0, say)))
    try:
        await asyncio.wait(tasks, timeout=max(0.0, t0 + seconds + GRACE_S - time.monotonic()))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return progress


def main(argv: list[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Entry point of `doctor sim scenario`."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(exc, file=err)
        return 2
    if ns.list:
        list_scenarios(out, ns.baseline)
        return 0
    if not ns.name:
        print("doctor sim scenario: error: name a scenario (--list shows them)", file=err)
        return 2
    catalogued = SCENARIOS.get(ns.name)
    if catalogued is None:
        print(f"doctor sim scenario: error: unknown scenario {ns.name!r}; known: {', '.join(SCENARIOS)}", file=err)
        return 2
    sc = catalogued.with_baseline(ns.baseline)
    seconds = sc.duration_s if ns.seconds is None else ns.seconds
    if not seconds > 0:
        print("doctor sim scenario: error: --seconds must be > 0", file=err)
        return 2
    if ns.port_base and not 1024 <= ns.port_base <= 65532:
        print("doctor sim scenario: error: --port-base must be within 1024..65532", file=err)
        return 2
    log_dir = ns.log_dir or Path(tempfile.mkdtemp(prefix=f"doctor-scenario-{sc.name}-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    dep = Deployment(sc, seed=ns.seed, port_base=ns.port_base, log_dir=log_dir, startup_scale=ns.sim_startup_scale)
    try:
        try:
            dep.start_all()
        except OSError as exc:
            print(f"doctor sim scenario: error: could not start the engines: {exc}", file=err)
            return 1
        say(f"scenario {sc.name}: {sc.description}")
        if sc.onset_s is not None and catalogued.onset_s != sc.onset_s:
            say(f"  here after a {sc.onset_s:g}s baseline (--baseline SECONDS; the catalogue's long form, which the "
                f"accuracy trials run, has it at t={catalogued.onset_s:g}s)")
        for e in sc.engines:
            say(f"  {e.name} ({e.role}): {dep.url(e.name)}  dcgm {dep.dcgm_url(e.name)}  log {dep.log(e.name)}")
        for incident in sc.timeline:
            late = "" if incident.at_s < seconds else f"  (after the {seconds:g}s run: skipped)"
            say(f"  timeline: {incident.describe()}{late}")
        if sc.expected_playbook:
            say(f"  expected: {sc.expected_playbook} on {sc.expected_engine or 'any engine'} "
                f"(first remedy {sc.expected_remedy}), symptom from t={sc.onset_s:g}s")
        args = " ".join(f"--engine {e.name}={dep.url(e.name)} --dcgm {e.name}={dep.dcgm_url(e.name)} "
                        f"--log {e.name}={dep.log(e.name)}" for e in sc.engines)
        say(f"  try: doctor diagnose {args}")
        config = log_dir / "doctor.toml"
        timeline = log_dir / "timeline.json"
        config.write_text(doctor_toml(sc, {e.name: dep.url(e.name) for e in sc.engines},
                                      {e.name: dep.dcgm_url(e.name) for e in sc.engines},
                                      {e.name: dep.log(e.name) for e in sc.engines}, state_dir=log_dir / "state"))
        say(f"  or watch it: doctor tui --config {config} --timeline {timeline}")
        progress = asyncio.run(run_scenario(dep, seconds, warmup=not ns.no_warmup, say=say, timeline_file=timeline))
        for name, p in progress.items():
            say(f"{name}: {p.sent} sent, {p.completed} completed, {p.failed} failed, "
                f"{p.in_flight} in flight at the end")
        say("scenario finished")
        return 0
    except KeyboardInterrupt:
        say("interrupted: stopping the engines")
        return 130
    finally:
        dep.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
