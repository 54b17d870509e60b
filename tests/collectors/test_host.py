"""Host collector: process_* signals from sim scrapes, psutil discovery of a real sim engine, pinned logic."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from collectors.host import (
    MULTIPROCESS_REASON,
    LocalProcessFinder,
    local_process_signals,
    process_signals,
    role_of,
)
from collectors.scrape import parse_metrics
from collectors.types import MetricsSnapshot
from sim.harness import Harness
from sim.workload import RequestSpec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----- process_* metrics --------------------------------------------------------------------------


def _scrape(h: Harness, name: str) -> MetricsSnapshot:
    return parse_metrics(h.metrics_text(name), h.now)


def test_process_signals_from_two_sim_scrapes() -> None:
    h = Harness()
    engine = h.add_engine("hot", ["m"])
    h.run_for(5)
    first, cpu0, t0 = _scrape(h, "hot"), engine.core.metrics.process.cpu_seconds, h.now
    for i in range(40):
        h.submit("hot", RequestSpec(index=i, arrival_s=6 + i * 0.5, prompt_tokens=300, output_tokens=40, long=False))
    h.run_for(60)
    second, cpu1, t1 = _scrape(h, "hot"), engine.core.metrics.process.cpu_seconds, h.now
    assert cpu1 > cpu0
    values, reasons = process_signals(first, second)
    assert values["process_cpu"] == pytest.approx((cpu1 - cpu0) / (t1 - t0))
    assert values["process_rss_bytes"] == engine.core.metrics.process.resident_bytes
    assert reasons == {}
    values, reasons = process_signals(None, second)
    assert values["process_cpu"] is None and "two scrapes" in reasons["process_cpu"]
    assert values["process_rss_bytes"] is not None


def test_process_signals_absent_in_multiprocess_mode() -> None:
    h = Harness()
    h.add_engine("old", ["m", "--vllm-version", "0.6"])  # V0's MultiProcessCollector: no process_*
    h.run_for(10)
    values, reasons = process_signals(_scrape(h, "old"), _scrape(h, "old"))
    assert values == {"process_cpu": None, "process_rss_bytes": None}
    assert reasons["process_cpu"] == MULTIPROCESS_REASON and "api-server-count > 1" in MULTIPROCESS_REASON


def _snap(t: float, cpu: float, start: float | None = None) -> MetricsSnapshot:
    gauges = {"process_rss_bytes": 1e9} | ({} if start is None else {"process_start_time": start})
    return MetricsSnapshot(timestamp=t, counters={"process_cpu_seconds": cpu}, gauges=gauges, histograms={},
                           info={}, names_seen=frozenset())


def test_process_signals_survive_a_restart() -> None:
    values, reasons = process_signals(_snap(100, 50.0), _snap(110, 2.0, start=106))
    assert values["process_cpu"] == pytest.approx(0.5)  # 2 s of CPU in the 4 s since the new start
    assert "restarted" in reasons["process_cpu"]
    values, reasons = process_signals(_snap(100, 50.0), _snap(110, 2.0))
    assert values["process_cpu"] is None and "restarted" in reasons["process_cpu"]
    assert process_signals(_snap(100, 5.0), _snap(100, 6.0))[0]["process_cpu"] is None


# ----- psutil against a real sim engine process ---------------------------------------------------


@pytest.fixture(scope="module")
def sim_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    ledger = Path(tmp_path_factory.mktemp("ledger")) / "gpus.json"
    proc = subprocess.Popen([sys.executable, "-m", "doctor.cli", "sim", "engine", "m", "--port", str(port),
                             "--host", "127.0.0.1", "--gpu-ledger", str(ledger), "--sim-startup-scale", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sim engine did not come up on port {port} (exit {proc.poll()})")
            time.sleep(0.1)
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_finds_a_real_sim_engine_by_its_port(sim_engine: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, proc = sim_engine
    finder = LocalProcessFinder()
    first = finder.read(port)
    api = first.api_server
    assert api is not None and api.pid == proc.pid
    assert role_of(api.title) == "api_server"  # `python -m doctor.cli sim engine`: the sim's title
    assert api.rss_bytes is not None and api.rss_bytes > 0
    assert api.threads is not None and api.threads >= 1
    assert api.cpu_cores is None and first.api_server_pinned is None  # no interval, first read
    assert first.mem_total_bytes and first.mem_available_bytes and first.swap_total_bytes is not None
    second = finder.read(port)  # cpu_times delta since the first read
    assert second.api_server is not None and second.api_server.cpu_cores is not None
    assert second.api_server.cpu_cores >= 0.0
    values, _ = local_process_signals(second)
    assert values["process_rss_bytes"] == second.api_server.rss_bytes


def test_nothing_on_a_free_port() -> None:
    reading = LocalProcessFinder().read(free_port())
    assert reading.processes == () and reading.api_server_pinned is None
    assert any("no local process listens" in n for n in reading.notes)
    values, reasons = local_process_signals(reading)
    assert values["process_cpu"] is None and "no local process listens" in reasons["process_cpu"]


@pytest.mark.parametrize(("title", "role"), [
    ("VLLM::EngineCor", "engine_core"),  # /proc/PID/comm: 15 characters of VLLM::EngineCore
    ("VLLM::EngineCore_DP0", "engine_core"),
    ("VLLM::Worker_TP1", "worker"),
    ("VLLM::APIServer_0", "api_server"),
    ("python3 /usr/bin/python3 -m vllm.entrypoints.openai.api_server --model m", "api_server"),
    ("vllm /opt/venv/bin/python3 /opt/venv/bin/vllm serve Qwen/Qwen2.5-7B --port 8000", "api_server"),
    ("python python -m doctor.cli sim engine m --port 8001", "api_server"),
    ("doctor /usr/bin/doctor sim engine m", "api_server"),
    ("python python -m http.server 8000", None),
])
def test_role_of_process_titles(title: str, role: str | None) -> None:
    assert role_of(title) == role


# ----- the pinned logic with a fake psutil (CPU time is deterministic) ----------------------------


class _Denied(Exception):
    pass


class _Gone(Exception):
    pass


class FakeProc:
    def __init__(self, pid: int, title: str, cpu: list[float], *, children: list[FakeProc] | None = None,
                 deny_memory: bool = False) -> None:
        self.pid, self.title, self._cpu = pid, title, list(cpu)
        self._children = children or []
        self.deny_memory = deny_memory
        self.running = True
        self.children_asked = 0

    def is_running(self) -> bool:
        return self.running

    def cmdline(self) -> list[str]:
        return self.title.split()

    def name(self) -> str:
        return self.title.split()[0][:15]

    def cpu_times(self) -> SimpleNamespace:
        total = self._cpu.pop(0) if len(self._cpu) > 1 else self._cpu[0]
        return SimpleNamespace(user=total * 0.9, system=total * 0.1)

    def memory_info(self) -> SimpleNamespace:
        if self.deny_memory:
            raise _Denied()
        return SimpleNamespace(rss=512 * 1024**2)

    def num_threads(self) -> int:
        return 12

    def children(self, recursive: bool = False) -> list[FakeProc]:
        self.children_asked += 1
        return self._children

    def create_time(self) -> float:
        return 1.0

    def net_connections(self, kind: str = "inet") -> list[Any]:
        return []


class FakePsutil:
    CONN_LISTEN = "LISTEN"
    AccessDenied = _Denied
    NoSuchProcess = _Gone
    ZombieProcess = _Gone

    def __init__(self, procs: list[FakeProc], port: int, owner: int, *, deny_sockets: bool = False) -> None:
        self.procs = {p.pid: p for p in procs}
        self.port, self.owner, self.deny_sockets = port, owner, deny_sockets

    def net_connections(self, kind: str = "inet") -> list[Any]:
        if self.deny_sockets:
            raise _Denied()
        return [SimpleNamespace(status="LISTEN", laddr=("0.0.0.0", self.port), pid=self.owner)]

    def process_iter(self) -> list[FakeProc]:
        return list(self.procs.values())

    def Process(self, pid: int) -> FakeProc:
        return self.procs[pid]

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(total=64 * 1024**3, available=20 * 1024**3)

    def swap_memory(self) -> SimpleNamespace:
        return SimpleNamespace(total=8 * 1024**3, used=3 * 1024**3)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _vllm_tree(api_cpu: list[float]) -> tuple[FakeProc, FakeProc]:
    core = FakeProc(201, "VLLM::EngineCore", [10.0, 12.0])
    api = FakeProc(200, "vllm /venv/bin/python /venv/bin/vllm serve m --port 8000", api_cpu, children=[core])
    return api, core


def test_api_server_pinned_over_the_interval() -> None:
    api, core = _vllm_tree([100.0, 100.98])  # 0.98 s of CPU in a 1 s interval
    clock = FakeClock()
    finder = LocalProcessFinder(FakePsutil([api, core], 8000, 200), clock=clock, sleep=clock.sleep)
    reading = finder.read(8000, interval_s=1.0)
    assert [(p.role, p.pid) for p in reading.processes] == [("api_server", 200), ("engine_core", 201)]
    assert reading.api_server is not None and reading.api_server.cpu_cores == pytest.approx(0.98)
    assert reading.processes[1].cpu_cores == pytest.approx(2.0)  # the engine core busy-polls two cores' worth
    assert reading.api_server_pinned is True and any("pinned" in n for n in reading.notes)
    assert (reading.mem_available_bytes, reading.swap_used_bytes) == (20 * 1024**3, 3 * 1024**3)
    values, _ = local_process_signals(reading)
    assert values["api_server_pinned"] == 1.0 and values["process_cpu"] == pytest.approx(0.98)


def test_api_server_not_pinned_from_deltas_between_reads() -> None:
    api, core = _vllm_tree([100.0, 101.0])
    clock = FakeClock()
    finder = LocalProcessFinder(FakePsutil([api, core], 8000, 200), clock=clock, sleep=clock.sleep)
    assert finder.read(8000).api_server_pinned is None  # first read: no delta yet
    clock.now += 2.0  # 1 s of CPU over 2 s
    reading = finder.read(8000)
    assert reading.api_server is not None and reading.api_server.cpu_cores == pytest.approx(0.5)
    assert reading.api_server_pinned is False


def test_the_engines_processes_are_found_once_while_they_run() -> None:
    """Its children are looked for again only after RECHECK_S, or at once when one of them has exited."""
    from collectors.host import RECHECK_S

    api, core = _vllm_tree([100.0])
    clock = FakeClock()
    finder = LocalProcessFinder(FakePsutil([api, core], 8000, 200), clock=clock, sleep=clock.sleep)
    for _ in range(5):
        clock.now += 1.0
        assert {p.pid for p in finder.read(8000).processes} == {200, 201}
    assert api.children_asked == 1
    core.running = False  # the engine core died: the family is looked for again
    api._children = []
    assert {p.pid for p in finder.read(8000).processes} == {200} and api.children_asked == 2
    clock.now += RECHECK_S + 1
    finder.read(8000)
    assert api.children_asked == 3


def test_access_denied_degrades_with_a_reason() -> None:
    core = FakeProc(201, "VLLM::EngineCore", [1.0], deny_memory=True)
    api = FakeProc(200, "python -m vllm.entrypoints.openai.api_server", [5.0], children=[core])
    ps = FakePsutil([api, core], 8000, 200, deny_sockets=True)

    def conns(kind: str = "inet") -> list[Any]:
        return [SimpleNamespace(status="LISTEN", laddr=("127.0.0.1", 8000))]

    api.net_connections = conns  # type: ignore[method-assign]
    clock = FakeClock()
    reading = LocalProcessFinder(ps, clock=clock, sleep=clock.sleep).read(8000, interval_s=0.5)
    assert reading.api_server is not None and reading.api_server.pid == 200
    denied = next(p for p in reading.processes if p.pid == 201)
    assert denied.rss_bytes is None and denied.threads is None
    assert any("listing sockets was denied" in n for n in reading.notes)
    assert any("pid 201 (engine_core): access denied" in n for n in reading.notes)


def test_a_remembered_port_owner_is_trusted_while_it_runs_and_checked_on_its_own_sockets_now_and_then() -> None:
    from collectors.host import RECHECK_S

    api, core = _vllm_tree([5.0])
    api.create_time = lambda: 111.0  # type: ignore[attr-defined]
    ps = FakePsutil([api, core], 8000, 200)
    host_lists, own_checks = [], []
    listening = [SimpleNamespace(status="LISTEN", laddr=("127.0.0.1", 8000))]

    def own(kind: str = "inet") -> list[Any]:
        own_checks.append(kind)
        return list(listening)

    api.net_connections = own  # type: ignore[method-assign]
    real = ps.net_connections

    def counted(kind: str = "inet") -> list[Any]:
        host_lists.append(kind)
        return real(kind)

    ps.net_connections = counted  # type: ignore[method-assign]
    clock = FakeClock()
    finder = LocalProcessFinder(ps, clock=clock, sleep=clock.sleep)
    notes: list[str] = []
    assert finder.port_owner(8000, notes) == 200 and len(host_lists) == 1
    assert finder.port_owner(8000, notes) == 200 and (len(host_lists), len(own_checks)) == (1, 0)  # trusted
    clock.now += RECHECK_S + 1
    assert finder.port_owner(8000, notes) == 200 and (len(host_lists), len(own_checks)) == (1, 1)  # its own
    listening.clear()  # the engine restarted elsewhere: pid 200 no longer listens on 8000
    clock.now += RECHECK_S + 1
    ps.owner = 300
    ps.procs[300] = FakeProc(300, "vllm serve m --port 8000", [1.0])
    assert finder.port_owner(8000, notes) == 300 and len(host_lists) == 2
    api.create_time = lambda: 222.0  # type: ignore[attr-defined]  # a pid reused by another process
    ps.procs[300].create_time = lambda: 333.0  # type: ignore[attr-defined]
    ps.owner = 200
    finder._owners[8000] = (300, 999.0, clock.now)  # remembered with another start time: searched again
    assert finder.port_owner(8000, notes) == 200 and len(host_lists) == 3
