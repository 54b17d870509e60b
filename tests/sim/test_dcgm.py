"""The sim's dcgm-exporter is the node's, not the engine's: it keeps reporting the GPU after the engine died."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest

from collectors.gpu import DcgmSource
from sim.gpu import GIB, Activity, FileLedger, MemoryLedger
from sim.testing import ALL_GRAPHED, FAST_START, engine_thread

DOCTOR = [sys.executable, "-m", "doctor.cli"]
# All graphed (no eager step pays the cold start) and no modelled start-up: the engine serves at once.
FAST = [*ALL_GRAPHED, *FAST_START, "--time-scale", "0.1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _eventually(check: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _listener_pid(port: int) -> int | None:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return int(conn.pid)
    return None


@contextmanager
def _exporter(ledger: Path, gpus: str = "0") -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = _free_port()
    proc = subprocess.Popen([*DOCTOR, "sim", "dcgm", "--port", str(port), "--gpu-ledger", str(ledger),
                             "--gpus", gpus], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert _eventually(lambda: _answers(url)), "doctor sim dcgm did not come up"
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(10)


def test_ledger_keeps_the_xid_and_frees_a_dead_holders_memory(tmp_path: Path) -> None:
    ledger = FileLedger(tmp_path / "gpus.json")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ledger.claim("a", (0,), 40 * GIB, 80 * GIB)
        ledger.report("a", Activity(0.5, 0.4, 0.3, time.time()))
        ledger.record_xid((0,), 79)
        view = ledger.view()
        assert view.used(0) == 40 * GIB and view.gpus[0].xid_last == 79
        assert view.claims["a"].activity is not None and view.claims["a"].activity.gpu_util == 0.5
        # a claim whose process is gone is memory the driver freed
        raw = (tmp_path / "gpus.json").read_text().replace(f'"pid": {os.getpid()}', f'"pid": {sleeper.pid}')
        (tmp_path / "gpus.json").write_text(raw)
        assert ledger.used(0) == 40 * GIB
    finally:
        sleeper.kill()
        sleeper.wait()
    assert ledger.used(0) == 0.0
    assert ledger.view().gpus[0].xid_last == 79  # the Xid is the GPU's, not the process's


def test_memory_ledger_view_is_a_copy() -> None:
    ledger = MemoryLedger()
    ledger.claim("a", (0, 1), GIB, 80 * GIB)
    view = ledger.view()
    ledger.release("a")
    assert view.used(1) == GIB and ledger.view().used(1) == 0.0


def test_exporter_of_an_engine_thread_outlives_the_engine() -> None:
    """The engine dies of Xid 79 and its server shuts down; the node's exporter still reports the GPU."""
    with engine_thread(["m", *FAST, "--dcgm-port", "0", "--fault", "xid@0.3:79"]) as eng:
        assert eng.dcgm_port
        url = f"http://127.0.0.1:{eng.dcgm_port}/metrics"
        assert _eventually(lambda: not eng._thread.is_alive()), "the API server did not shut down after the death"
        assert not _answers(eng.url + "/health")
        after = DcgmSource(url, httpx.Client(trust_env=False)).read()[0]
        assert after.xid_last == 79
        assert after.fb_used_bytes == 0.0  # the dead engine's memory was freed


def test_exporter_shared_by_engines_on_the_node(tmp_path: Path) -> None:
    ledger = tmp_path / "gpus.json"
    with _exporter(ledger, "0,1") as (_, url):
        src = DcgmSource(url, httpx.Client(trust_env=False))
        assert [r.fb_used_bytes for r in src.read()] == [0.0, 0.0]
        port = url.split(":")[2].split("/")[0]
        with engine_thread(["m", *FAST, "--dcgm-port", port], ledger=FileLedger(ledger)) as eng:
            assert eng.exporter is None and eng.dcgm_port == int(port)  # it found the node's exporter there
            readings = src.read()
            assert readings[0].fb_used_bytes == pytest.approx(0.92 * 80 * GIB, abs=2 * 1024**2)
            assert readings[1].fb_used_bytes == 0.0
        assert _eventually(lambda: src.read()[0].fb_used_bytes == 0.0)  # stopped engine: memory freed


def test_cli_engine_starts_a_detached_exporter_that_outlives_it(tmp_path: Path) -> None:
    """`doctor sim engine --dcgm-port P` starts the node's exporter apart; after the engine died it still answers."""
    port, dcgm_port = _free_port(), _free_port()
    ledger = tmp_path / "gpus.json"
    out = open(tmp_path / "engine.out", "w")  # noqa: SIM115 - closed below
    engine = subprocess.Popen([*DOCTOR, "sim", "engine", "m", *FAST, "--host", "127.0.0.1", "--port", str(port),
                               "--dcgm-port", str(dcgm_port), "--gpu-ledger", str(ledger),
                               "--fault", "xid@1:79"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{dcgm_port}/metrics"
    exporter_pid: int | None = None
    try:
        assert _eventually(lambda: _answers(url)), "no exporter on --dcgm-port"
        exporter_pid = _listener_pid(dcgm_port)
        assert exporter_pid is not None and exporter_pid != engine.pid
        engine.wait(30)  # the engine dies of the Xid; the API server shuts down
        reading = DcgmSource(url, httpx.Client(trust_env=False)).read()[0]
        assert reading.xid_last == 79 and reading.fb_used_bytes == 0.0
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        out.close()
        if exporter_pid is None:
            exporter_pid = _listener_pid(dcgm_port)
        if exporter_pid is not None:
            os.kill(exporter_pid, signal.SIGTERM)
            assert _eventually(lambda: not psutil.pid_exists(exporter_pid) or
                               psutil.Process(exporter_pid).status() == psutil.STATUS_ZOMBIE, 10)
