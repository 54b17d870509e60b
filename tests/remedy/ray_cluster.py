"""A real multi-node Ray cluster on loopback for the Ray launcher's tests: one `ray start --block` per node.

Each node is its own `ray start --block` process in its own session (so its raylet, agents and workers are one
process group); the head on 127.0.0.1 with no GPUs, workers on 127.0.0.2, 127.0.0.3, ... declaring GPUs they do
not have. Every port is chosen free, the temp dir is the test's own, and teardown stops only these groups (never
`ray stop`, which stops every Ray on the machine). Killing a node's group is a node loss: Ray sees it die.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
ROOT = Path(__file__).resolve().parents[2]
OBJECT_STORE_BYTES = 80 * 1024 * 1024
# The GCS marks a node dead after health_check_failure_threshold missed checks (defaults: 3 s period, 5 misses):
# shortened here so a killed node is seen within a few seconds.
FAST_HEALTH = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "500",
               "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))  # free on every address: some of Ray's agents bind 0.0.0.0
        return int(s.getsockname()[1])


def _ports(n: int, taken: set[int]) -> list[int]:
    """`n` ports free now and not in `taken` (the cluster's other nodes'), added to it."""
    out: list[int] = []
    while len(out) < n:
        p = _free_port()
        if p not in taken:
            taken.add(p)
            out.append(p)
    return out


@dataclass
class RayNode:
    host: str
    gpus: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def tree(self) -> list[psutil.Process]:
        """Every process of this node: `ray start` and its descendants (raylet, agents, workers in their own
        sessions, the engines they run)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def kill(self) -> list[psutil.Process]:
        """A node loss: SIGKILL to every process of the node at once; the processes it killed."""
        procs = self.tree()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        return procs

    def stop(self, grace_s: float = 3.0) -> list[psutil.Process]:
        """SIGTERM to the node's `ray start` (it stops its processes), SIGKILL to what is left after `grace_s`."""
        procs = self.tree()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        psutil.wait_procs(procs, timeout=grace_s)
        return [*procs, *self.kill()]


@dataclass
class LoopbackCluster:
    temp_dir: Path
    address: str = ""
    nodes: list[RayNode] = field(default_factory=list)
    taken: set[int] = field(default_factory=set)

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **FAST_HEALTH}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        return env

    def _start(self, host: str, gpus: int, head: bool) -> RayNode:
        p = _ports(14, self.taken)
        args = [RAY, "start", "--block", "--node-ip-address", host, "--num-cpus", "1", "--num-gpus", str(gpus),
                "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
                "--node-manager-port", str(p[0]), "--object-manager-port", str(p[1]),
                "--metrics-export-port", str(p[2]), "--dashboard-agent-listen-port", str(p[3]),
                "--dashboard-agent-grpc-port", str(p[4]), "--runtime-env-agent-port", str(p[5]),
                "--worker-port-list", ",".join(map(str, p[6:12])), "--include-log-monitor", "false"]
        if head:
            self.address = f"{host}:{p[12]}"
            args += ["--head", "--port", str(p[12]), "--include-dashboard", "false",
                     "--ray-client-server-port", str(p[13])]
        else:
            args += ["--address", self.address]
        node_dir = self.temp_dir / host  # each node its own: raylets starting at once race for socket names
        node_dir.mkdir()
        args += ["--temp-dir", str(node_dir)]
        log = self.temp_dir / f"node-{host}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self._env(), start_new_session=True, cwd=str(self.temp_dir))
        node = RayNode(host, gpus, proc, log)
        self.nodes.append(node)
        return node

    def wait_started(self, node: RayNode, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "Ray runtime started" in node.log.read_text(errors="replace"):
                return
            if not node.running:
                break
            time.sleep(0.2)
        raise RuntimeError(f"ray node {node.host} did not start:\n{node.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> list[psutil.Process]:
        """Every node stopped (workers first, the head last); the processes that were stopped."""
        return [p for node in reversed(self.nodes) for p in node.stop()]


@contextlib.contextmanager
def loopback_cluster(workers: dict[str, int]):  # type: ignore[no-untyped-def]
    """A head on 127.0.0.1 (no GPUs) and one worker per `workers` item (address -> GPUs it declares)."""
    temp = Path(tempfile.mkdtemp(prefix="rayt", dir="/tmp"))
    cluster = LoopbackCluster(temp)
    try:
        head = cluster._start("127.0.0.1", 0, head=True)
        started = [cluster._start(host, gpus, head=False) for host, gpus in workers.items()]  # they wait for the GCS
        for node in [head, *started]:
            cluster.wait_started(node)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(temp, ignore_errors=True)
