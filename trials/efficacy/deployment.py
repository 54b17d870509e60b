"""The deployment of an efficacy run, as an operator would set it up for the doctor, on the harness's I/O.

The scenario's engines were started by the doctor's launcher (their records in its process table, so it may
relaunch them), each on its own port of the trial's network (`http://hot.sim:8000`), behind the virtual router at
ROUTER_URL; a doctor.toml equivalent (DoctorConfig) names them with their roles, logs, GPUs, dcgm-exporters,
launcher templates and arguments, and the router. The doctor's cycle (`plan`) runs over that config with only
I/O substituted: the network's transports, the harness's clock, a wait that advances it, the launcher's
process table (trials.sim_procs) and the machine's GPUs (`gpus` of them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import httpx

from doctor.config import DoctorConfig, EngineConfig, RouterSettings
from doctor.plan import Plan
from doctor.remedy.launcher import LocalLauncher
from doctor.remedy.model import LaunchingActuator
from doctor.remedy.router_actuator import RouterActuator
from router.policy import initial_policy
from sim.scenarios import Scenario
from trials.efficacy.harness import EfficacyHarness
from trials.efficacy.vrouter import ROUTER_URL, VirtualRouter
from trials.scenario import engine_config
from trials.sim_io import LogFiles, SimNetwork, dcgm_url, engine_url
from trials.sim_procs import SimProcesses, serve_line

FIRST_ENGINE_PORT = 8000
SAMPLE_S = 5.0  # between a cycle's two reads (doctor diagnose's default)


@dataclass
class Deployment:
    h: EfficacyHarness
    net: SimNetwork
    logs: LogFiles
    procs: SimProcesses
    router: VirtualRouter
    config: DoctorConfig
    state_dir: Path
    gpus: int

    async def sleep(self, seconds: float) -> None:
        """The cycle's waits advance the harness; what the engines printed meanwhile is in their log files."""
        self.h.run_until(self.h.now + seconds)
        self.logs.append()

    def launcher(self, router: RouterActuator) -> LaunchingActuator:
        """The doctor's own launcher over the harness's process table, network, clock and GPUs."""
        transport = self.net.transport()
        return LocalLauncher(self.state_dir, router=router, procs=self.procs, gpu_pool=tuple(range(self.gpus)),
                             client_factory=lambda t: httpx.AsyncClient(transport=transport, timeout=t),
                             clock=lambda: self.h.now, sleep=self.sleep)

    def plan(self, *, fix: bool) -> Plan:
        """The cycle's plan: the config's engines (EngineConfig.ref), its settings, the harness's I/O."""
        return Plan(engines=tuple(e.ref() for e in self.config.engines), state_dir=self.state_dir,
                    settings=self.config, sample_s=SAMPLE_S, window_s=self.config.window_s,
                    min_requests=self.config.min_requests, long_prompt_tokens=self.config.long_prompt_tokens,
                    router=ROUTER_URL, fix=fix, trigger="trial", transport=self.net.transport(),
                    sync_transport=self.net.sync_transport(), sleep=self.sleep, launcher=self.launcher,
                    processes=self.procs)


def _gpus(env: dict[str, str], default: int) -> tuple[int, ...]:
    value = env.get("CUDA_VISIBLE_DEVICES")
    return tuple(int(g) for g in value.split(",") if g.strip()) if value else (default,)


def deploy(h: EfficacyHarness, sc: Scenario, *, seed: int, tmp: Path, gpus: int,
           config: DoctorConfig | None = None, warm_up: bool = True) -> Deployment:
    """Start the scenario's engines through the process table (dev mode on, as the deployment runs them, so /sleep
    and /wake_up exist), warm them up, put the router in front, and write the doctor's config."""
    net = SimNetwork(h)
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    logs = LogFiles(h, tmp / "logs")
    state_dir = tmp / "state"
    envs = {e.name: {**e.env, "VLLM_SERVER_DEV_MODE": "1"} for e in sc.engines}

    def env_for(name: str) -> dict[str, str]:
        base = next((n for n in envs if name == n or name.startswith(n + "-")), None)
        return {k: v for k, v in envs.get(base or "", {}).items() if k != "CUDA_VISIBLE_DEVICES"}

    procs = SimProcesses(h, net, logs, state_dir / "engines", env_for=env_for)
    engines: list[EngineConfig] = []
    for i, e in enumerate(sc.engines):
        argv = list(sc.argv_for(e.name, seed))
        port = FIRST_ENGINE_PORT + i
        url = engine_url(e.name, port)
        own = _gpus(envs[e.name], i)
        template = serve_line(argv)
        rec = procs.deploy(e.name, template.format(port=port), url=url, port=port, gpus=own, args={},
                           role=e.role)
        limits = engine_config(argv, envs[e.name])
        engines.append(EngineConfig(name=e.name, url=url, role=e.role if e.role in ("hot", "cold") else None,  # type: ignore[arg-type]
                                    log=rec.log, gpus=own, dcgm=dcgm_url(e.name), launcher=template,
                                    max_num_seqs=_int(limits.get("max_num_seqs")),
                                    max_num_batched_tokens=_int(limits.get("max_num_batched_tokens")),
                                    max_model_len=_int(limits.get("max_model_len"))))
        if warm_up:
            h.warm_up(e.name, at=h.start)
    policy = initial_policy([e.url for e in engines if e.role == "hot"], [e.url for e in engines if e.role == "cold"],
                            route_threshold_tokens=sc.route_threshold)
    router = VirtualRouter(h, net, policy, model=sc.argv_for(sc.engines[0].name, seed)[0])  # requests name the model
    base = config or DoctorConfig()
    doctor = dataclasses.replace(base, mode="auto", state_dir=state_dir, engines=tuple(engines),
                                 router=RouterSettings(url=ROUTER_URL), long_prompt_tokens=sc.route_threshold)
    return Deployment(h, net, logs, procs, router, doctor, state_dir, gpus)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
