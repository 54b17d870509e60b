"""RayLauncher on a real 3-node Ray cluster on loopback (tests/remedy/ray_cluster.py), with real sim engines and
the real router: placement, CUDA_VISIBLE_DEVICES, pending actors and node loss are Ray's own; the GPUs are not
(the worker nodes declare GPUs they do not have). Runs under `make test-ray` (SERVING_DOCTOR_RAY_TESTS=1): the
cluster alone takes ~30 s to start on 2 cores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from doctor.config_launcher import LauncherSettings
from doctor.engines import EngineRef
from doctor.launched import with_launched
from doctor.remedy.model import ActuatorContext, ActuatorError, EngineTarget, LaunchedEngine, Refused
from doctor.remedy.ray_engines import PlacementError, RayEngines, ray_records
from doctor.remedy.ray_launcher import RayLauncher
from doctor.remedy.router_actuator import RouterActuator
from playbooks.model import Action
from router.config import RouterConfig
from router.server import RouterThread, router_thread
from sim.testing import engine_thread
from tests.remedy.ray_cluster import LoopbackCluster, RayNode, loopback_cluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240),
              pytest.mark.skipif(os.environ.get("SERVING_DOCTOR_RAY_TESTS") != "1",
                                 reason="the 3-node Ray cluster runs under make test-ray (SERVING_DOCTOR_RAY_TESTS=1)")]

TOKEN = "ray-launcher-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WORKERS = {"127.0.0.2": 2, "127.0.0.3": 2}  # each declares 2 GPUs it does not have
TEMPLATE = (f"{sys.executable} -m doctor.cli sim engine m --host {{host}} --port {{port}} "
            "--max-num-seqs {max_num_seqs} --max-model-len 4096 --gpu-memory-utilization 0.5 --enforce-eager "
            "--time-scale 0.1 --sim-startup-scale 0 --served-model-name {name} "
            "--gpu-ledger {state_dir}/gpus-{host}.json")  # one GPU ledger per node: each node has its own GPUs 0, 1


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@dataclass
class Cluster:
    ray: LoopbackCluster
    namespace: str
    state: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    state = tmp_path_factory.mktemp("ray-state")
    with loopback_cluster(WORKERS) as ray_cluster:
        c = Cluster(ray_cluster, f"doctor-test-{uuid.uuid4().hex[:8]}", state)
        try:
            yield c
        finally:
            import ray

            ray.shutdown()
            stopped = ray_cluster.stop()
    left = [p for p in stopped if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    engines = [p for p in psutil.process_iter(["cmdline"]) if str(state) in " ".join(p.info["cmdline"] or [])]
    assert not left and not engines, f"left running: {left} {engines}"  # nothing of the cluster, no engine


def launcher(c: Cluster, **kw: Any) -> RayLauncher:
    kw.setdefault("placement_timeout_s", 30.0)
    return RayLauncher(c.state, address=c.ray.address, namespace=c.namespace, router=RouterActuator(),
                       health_timeout_s=60.0, stop_grace_s=5.0, drain_timeout_s=20.0, retire_timeout_s=5.0,
                       warm_batches=(4,), warm_prompt_tokens=(64,), **kw)


def hot_target(tp: int) -> EngineTarget:
    return EngineTarget("hot", "hot", "http://127.0.0.1:8000", launcher=TEMPLATE, max_model_len=4096,
                        args={"max_num_seqs": 8, "tensor_parallel_size": tp})


def environ(pid: int) -> dict[str, str]:
    return dict(psutil.Process(pid).environ())


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False


def free_gpus(lau: RayLauncher, want: dict[str, float] | None = None, total: float | None = None) -> dict[str, float]:
    """Free GPUs per node as the GCS reports them, waited for (bounded) until they read `want` or sum to `total`:
    a stopped actor's GPUs come back to the GCS's view a moment later."""
    deadline = time.monotonic() + 30
    while True:
        free = {n.host: n.free_gpus for n in lau.ray_engines.nodes()}
        ok = (want is None or all(free.get(h) == v for h, v in want.items())) and (
            total is None or sum(free.values()) == total)
        if ok or time.monotonic() > deadline:
            return free
        time.sleep(0.2)


@dataclass
class Stack:
    launcher: RayLauncher
    ctx: ActuatorContext
    router: RouterThread
    hot: LaunchedEngine

    def upstreams(self, role: str) -> list[dict[str, Any]]:
        return list(httpx.get(self.router.url + "/router/policy", headers=AUTH).json()["upstreams"][role])


@pytest.fixture
def stack(cluster: Cluster) -> Iterator[Stack]:
    """`hot` with tensor_parallel_size 2 placed by Ray (one whole worker node), behind the router with a cold
    engine beside it."""
    lau = launcher(cluster)
    target = hot_target(2)
    rec = lau.start(target, port=lau.procs.free_port("127.0.0.1"), gpus=[0, 1], args={})
    try:
        run(lau.wait_healthy(rec))
        target.url, target.gpus = rec.url, rec.gpus
        free_gpus(lau, total=sum(n.gpus for n in lau.ray_engines.nodes()) - 2)  # what earlier tests stopped is free
        with engine_thread(["m", "--time-scale", "0.1", "--max-model-len", "4096"]) as cold:
            cfg = RouterConfig(hot=[rec.url], cold=[cold.url], port=0, policy_file="", health_interval_s=0.2,
                               route_threshold_tokens=1000)
            with router_thread(cfg, token=TOKEN) as rt:
                ctx = ActuatorContext(engines={"hot": target, "cold": EngineTarget("cold", "cold", cold.url)},
                                      state_dir=cluster.state, router_url=rt.url, router_token=TOKEN,
                                      bounds={"tensor_parallel_max": 2})
                yield Stack(lau, ctx, rt, rec)
    finally:
        for r in lau.adopt():
            run(lau.stop(r))


def test_engines_are_placed_by_ray_with_the_gpus_it_assigned(stack: Stack) -> None:
    hot = stack.hot
    host = urlsplit(hot.url).hostname
    assert host in WORKERS and healthy(hot.url)  # a worker node's address: the head has no GPUs
    assert environ(hot.pid)["CUDA_VISIBLE_DEVICES"] == "0,1" and hot.gpus == (0, 1)
    assert f"--host {host}" in hot.command and "--tensor-parallel-size 2" in hot.command
    free = free_gpus(stack.launcher, total=2)
    assert free[host] == 0 and sum(free.values()) == 2  # the other worker's two


def test_scale_out_places_the_replica_on_the_node_with_free_gpus_and_refuses_what_cannot_be_placed(
        stack: Stack) -> None:
    lau, ctx = stack.launcher, stack.ctx
    hot_host = urlsplit(stack.hot.url).hostname
    other = next(h for h in WORKERS if h != hot_host)
    applied = run(lau.apply(Action("scale_out", "hot", {"add_replicas": 1}), ctx))
    replica = applied.changed
    assert urlsplit(replica["url"]).hostname == other and replica["gpus"] == [0, 1]
    rec = lau.record_for(replica["replica"])
    assert rec is not None and environ(rec.pid)["CUDA_VISIBLE_DEVICES"] == "0,1" and healthy(rec.url)
    assert [u["url"] for u in stack.upstreams("hot")] == [stack.hot.url, replica["url"]]

    # no node has two free GPUs now: refused with the reason, before anything is asked of Ray
    with pytest.raises(Refused, match=r"a replica needs 2 GPU\(s\) on one node and no Ray node has them free .*"
                                      r"127\.0\.0\.2 0 of 2, 127\.0\.0\.3 0 of 2"):
        lau.check(Action("scale_out", "hot", {"add_replicas": 1}), ctx)

    # nor a tensor-parallel degree no node has GPUs for
    with pytest.raises(Refused, match=r"tensor_parallel_size 3 needs 3 GPUs on one node; the most a node can give "
                                      r"is 2 \(free/total GPUs per node: "):
        lau.check(Action("scale_out", "hot", {"tensor_parallel_size": 3}), dataclasses.replace(
            ctx, bounds={"tensor_parallel_max": 4}))

    # what Ray itself cannot place is given up after placement_timeout_s, and nothing stays pending
    lau.ray_engines.placement_timeout_s = 2.0
    started = time.monotonic()
    with pytest.raises(PlacementError, match=r"not placed within 2s; free/total GPUs per node: .*"
                                             r"the pending actor was removed"):
        lau.start(hot_target(2), port=0, gpus=[0, 1], args={})
    assert time.monotonic() - started < 60  # bounded (generous: a loaded machine), never pending for ever
    from ray._private import state

    ours = [a for a in state.actors().values() if a["Name"].startswith("engine:")]
    assert not [a for a in ours if a["State"] not in ("ALIVE", "DEAD")], ours  # none pending
    assert sorted(r.name for r in lau.adopt()) == ["hot", replica["replica"]]

    # the inverse removes the replica: its node's GPUs are free again
    assert applied.inverse is not None
    run(lau.apply(applied.inverse, ctx))
    assert [u["url"] for u in stack.upstreams("hot")] == [stack.hot.url] and not healthy(replica["url"])
    assert free_gpus(lau, want={other: 2})[other] == 2


def test_a_restarted_doctor_adopts_the_engines_it_started(stack: Stack, cluster: Cluster) -> None:
    import ray

    ray.shutdown()  # the doctor process goes away; its detached actors stay
    settings = LauncherSettings("ray", cluster.ray.address, cluster.namespace)
    adopted = ray_records(cluster.state / "engines", settings)  # what each cycle reads (doctor.cycle)
    assert [(r.name, r.url, r.pid) for r in adopted] == [("hot", stack.hot.url, stack.hot.pid)]
    configured = EngineRef(name="hot", role="hot", url="http://127.0.0.1:8000")
    assert [e.url for e in with_launched([configured], adopted)] == [stack.hot.url]  # read where Ray put it
    again = RayEngines(cluster.state / "engines", address=cluster.ray.address, namespace=cluster.namespace)
    assert again.alive(adopted[0]) and healthy(stack.hot.url) and again.record_for("hot") == adopted[0]


async def relaunch_and_kill(stack: Stack, node: RayNode, killed: list[psutil.Process]) -> BaseException | None:
    """Relaunch `hot`; once its new engine runs (a slow start-up: the sim models vLLM's), `node` dies."""
    lau = stack.launcher
    task = asyncio.ensure_future(lau.apply(Action("relaunch", "hot", {"max_num_seqs": 6, "sim_startup_scale": 3.0}),
                                           stack.ctx))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not task.done() and not any(
            r.name == "hot" and r.pid != stack.hot.pid for r in await asyncio.to_thread(lau.adopt)):
        await asyncio.sleep(0.2)
    killed.extend(await asyncio.to_thread(node.kill))
    try:
        await task
    except BaseException as exc:  # the test looks at what it was
        return exc
    return None


def test_a_node_killed_mid_relaunch_is_reconciled(stack: Stack, cluster: Cluster) -> None:
    """Runs next to last: it takes a worker node away. Blue/green puts the new engine on the other node; that node dies
    while the engine starts; the relaunch fails, the old engine stays in service and the lost one's record is
    gone (a restarted doctor adopts only the old)."""
    lau, ctx = stack.launcher, stack.ctx
    hot_host = urlsplit(stack.hot.url).hostname
    other = next(n for n in cluster.ray.nodes if n.host in WORKERS and n.host != hot_host)
    killed: list[psutil.Process] = []
    err = run(relaunch_and_kill(stack, other, killed))
    assert killed and isinstance(err, ActuatorError), err
    assert "before becoming healthy" in str(err) and "the old engine stayed in service" in str(err)
    assert not [p for p in killed if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert healthy(stack.hot.url) and [u["url"] for u in stack.upstreams("hot")] == [stack.hot.url]
    deadline = time.monotonic() + 60
    while other.host in {n.host for n in lau.ray_engines.nodes()} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert other.host not in {n.host for n in lau.ray_engines.nodes()}  # Ray marked the node dead
    assert [(r.name, r.url) for r in lau.adopt()] == [("hot", stack.hot.url)]
    with pytest.raises(Refused, match=r"no Ray node has them free"):  # what is left has no room for a replica
        lau.check(Action("scale_out", "hot", {"add_replicas": 1}), ctx)


def test_the_last_node_lost_mid_in_place_relaunch_is_reported_and_leaves_no_record(stack: Stack,
                                                                                 cluster: Cluster) -> None:
    """Runs last, on the one worker left: no GPU is spare, so the relaunch is in place (drained at the router,
    stopped, started again on its own node); that node dies while the new engine starts. The rollback cannot
    bring the old engine back (its node is gone) and says so; the router has the engine back in rotation (it
    fails over by health), and no record of a lost engine stays."""
    lau = stack.launcher
    node = next(n for n in cluster.ray.nodes if n.host == urlsplit(stack.hot.url).hostname)
    assert lau.spare_gpus(stack.ctx) == []
    killed: list[psutil.Process] = []
    err = run(relaunch_and_kill(stack, node, killed))
    assert killed and isinstance(err, ActuatorError), err
    assert "rollback FAILED: the old engine did not come back" in str(err) and "is not alive in the Ray cluster" in \
        str(err), err
    assert [u["state"] for u in stack.upstreams("hot")] == ["active"]  # resumed, not left draining
    assert lau.adopt() == [] and not healthy(stack.hot.url)
