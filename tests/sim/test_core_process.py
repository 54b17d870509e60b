"""`doctor sim engine` runs vLLM V1's EngineCore in a child process: real pid, own title, dies as vLLM's does."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from sim.gpu import FileLedger
from sim.testing import ALL_GRAPHED, FAST_START

DOCTOR = [sys.executable, "-m", "doctor.cli"]
# All graphed (no eager step pays the cold start) and no modelled start-up: the engine serves at once.
FAST = [*ALL_GRAPHED, *FAST_START, "--time-scale", "0.1"]
CORE_PREFIX = re.compile(r"\((EngineCore(?:_DP0)?) pid=(\d+)\)")


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


def _health(url: str) -> int | None:
    try:
        return httpx.get(url + "/health", timeout=2).status_code
    except httpx.TransportError:
        return None


@dataclass
class Engine:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    ledger: Path

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children()


@contextmanager
def cli_engine(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Engine]:
    port = _free_port()
    log, ledger = tmp_path / "engine.log", tmp_path / "gpus.json"
    proc = subprocess.Popen([*DOCTOR, "sim", "engine", "m", *FAST, "--host", "127.0.0.1", "--port", str(port),
                             "--gpu-ledger", str(ledger), "--log-file", str(log), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    eng = Engine(proc, f"http://127.0.0.1:{port}", log, ledger)
    kids: list[psutil.Process] = []
    try:
        assert _eventually(lambda: proc.poll() is not None or _health(eng.url) == 200), "engine did not come up"
        kids = eng.children()
        yield eng
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for kid in kids:  # never leave an EngineCore behind
            if kid.is_running():
                kid.kill()


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _core(eng: Engine) -> psutil.Process:
    (core,) = eng.children()
    return core


def test_engine_core_is_a_real_child_named_as_vllm_names_it(tmp_path: Path) -> None:
    with cli_engine(tmp_path, "--vllm-version", "0.11") as eng:
        core = _core(eng)
        assert core.name() == "VLLM::EngineCore"  # vLLM's set_process_title("EngineCore")
        assert core.cmdline()[0] == "VLLM::EngineCore"
        logged = {int(m.group(2)) for line in eng.lines() if (m := CORE_PREFIX.search(line))}
        assert logged == {core.pid}  # the log's EngineCore pid is that process, not the API server's pid + 1
        assert any(CORE_PREFIX.search(line) and "EngineCore_DP0" in line for line in eng.lines())
        claims = json.loads(eng.ledger.read_text())["claims"]
        assert [c["pid"] for c in claims.values()] == [core.pid]  # its GPU memory is its own
        assert httpx.post(eng.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}).status_code == 200
    assert not core.is_running()  # stopping the API server stopped its EngineCore


def test_newer_releases_name_the_process_engine_core(tmp_path: Path) -> None:
    with cli_engine(tmp_path, "--vllm-version", "0.33") as eng:
        core = _core(eng)
        assert core.name() == "VLLM::EngineCore"
        assert {m.group(1) for line in eng.lines() if (m := CORE_PREFIX.search(line))} == {"EngineCore"}


def test_v0_profile_runs_the_engine_in_the_api_server(tmp_path: Path) -> None:
    with cli_engine(tmp_path, "--vllm-version", "0.10-v0") as eng:
        assert eng.children() == []
        claims = json.loads(eng.ledger.read_text())["claims"]
        assert [c["pid"] for c in claims.values()] == [eng.proc.pid]


def test_multiprocessing_off_keeps_the_core_in_process(tmp_path: Path) -> None:
    with cli_engine(tmp_path, "--vllm-version", "0.11", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}) as eng:
        assert eng.children() == []


def _stream_in_background(url: str, out: list[int | str]) -> threading.Thread:
    def run() -> None:
        try:
            with httpx.Client(timeout=60) as c, c.stream("POST", url + "/v1/completions", json={
                    "prompt": "x " * 50, "max_tokens": 4000, "ignore_eos": True, "stream": True}) as r:
                out.append(r.status_code)
                out.extend(chunk for chunk in r.iter_text())
        except httpx.HTTPError as exc:
            out.append(type(exc).__name__)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_killing_the_engine_core_kills_the_engine_as_vllm_0_11(tmp_path: Path) -> None:
    """SIGKILL the EngineCore: in-flight requests fail, /health 503, `died unexpectedly`, the server exits."""
    with cli_engine(tmp_path, "--vllm-version", "0.11") as eng:
        core = _core(eng)
        got: list[int | str] = []
        stream = _stream_in_background(eng.url, got)
        assert _eventually(lambda: len(got) > 1), "the stream never started"
        core.kill()
        stream.join(30)
        assert got[0] == 200 and "EngineCore encountered an issue" in "".join(map(str, got[1:]))
        assert _health(eng.url) in (503, None)
        r = httpx.post(eng.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=10) \
            if _health(eng.url) else None
        assert r is None or r.status_code == 500
        eng.proc.wait(30)  # vLLM's API server shuts itself down after its engine died
        text = eng.log.read_text()
        assert "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client." in text
        assert "EngineDeadError" in text
        assert FileLedger(eng.ledger).used(0) == 0.0  # the driver freed the dead core's memory


def test_keep_alive_keeps_the_api_server_after_the_core_died(tmp_path: Path) -> None:
    with cli_engine(tmp_path, "--vllm-version", "0.33", env={"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}) as eng:
        _core(eng).send_signal(signal.SIGKILL)
        assert _eventually(lambda: _health(eng.url) == 503)
        r = httpx.post(eng.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=10)
        assert r.status_code == 500
        assert r.json()["error"]["message"] == "The server had an error while processing your request."
        assert "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup" in eng.log.read_text()
        assert eng.proc.poll() is None


def test_a_fatal_error_is_logged_by_the_core_which_then_exits(tmp_path: Path) -> None:
    env = {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
    with cli_engine(tmp_path, "--vllm-version", "0.11", "--sim-fault-endpoint", env=env) as eng:
        core = _core(eng)
        assert httpx.post(eng.url + "/sim/fault", json={"fault": "engine-death"}).status_code == 200
        assert _health(eng.url) == 503
        assert _eventually(lambda: not core.is_running(), 15)  # run_engine_core re-raises: the process exits
        fatal = [line for line in eng.lines() if "EngineCore encountered a fatal error." in line]
        assert fatal and all(f"(EngineCore_DP0 pid={core.pid})" in line for line in fatal)
        assert not any("died unexpectedly" in line for line in eng.lines())  # it said why it died


def test_killing_the_api_server_takes_its_engine_core_along(tmp_path: Path) -> None:
    with cli_engine(tmp_path, "--vllm-version", "0.11") as eng:
        core = _core(eng)
        eng.proc.kill()
        eng.proc.wait()
        assert _eventually(lambda: _gone(core), 15)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopping_the_server_is_not_a_death(tmp_path: Path, sig: signal.Signals) -> None:
    with cli_engine(tmp_path, "--vllm-version", "0.11") as eng:
        core = _core(eng)
        eng.proc.send_signal(sig)
        assert eng.proc.wait(20) == 0
        assert _eventually(lambda: not core.is_running(), 10)
        assert "died unexpectedly" not in eng.log.read_text()


ACCESS = re.compile(r'INFO:     [\d.]+:(?P<port>\d+) - "(?P<method>\w+) (?P<path>\S+) HTTP/1.1" (?P<status>\d{3}) ')


def test_request_log_lines_flags_and_natural_finishes_through_the_engine_core(tmp_path: Path) -> None:
    """sim-a's API-server features with the core in its own process: the API server writes those lines."""
    args = ("--vllm-version", "0.33", "--enable-log-requests", "--dtype", "half",
            "--disable-access-log-for-endpoints", "/health,/metrics")
    with cli_engine(tmp_path, *args) as eng:
        core = _core(eng)
        httpx.get(eng.url + "/metrics", timeout=10)
        body = {"model": "m", "prompt": "hello there", "max_tokens": 10, "vllm_xargs": {"sim_eos_after_tokens": 3}}
        r = httpx.post(eng.url + "/v1/completions", json=body, timeout=30)
        assert r.status_code == 200
        assert r.json()["choices"][0]["finish_reason"] == "stop" and r.json()["usage"]["completion_tokens"] == 3
        rid = r.json()["id"]
        assert _eventually(lambda: any(f"Added request {rid}." in line for line in eng.lines()), 10)
        lines = eng.lines()
    api = f"(APIServer pid={eng.proc.pid})"
    warn = [x for x in lines if "does not model these vLLM arguments" in x]
    assert len(warn) == 1 and "--dtype" in warn[0] and api in warn[0]
    received = [x for x in lines if f"Received request {rid}: params: SamplingParams(" in x]
    assert len(received) == 1 and "max_tokens=10" in received[0] and api in received[0]
    assert all(f"pid={core.pid})" not in x for x in lines if rid in x)  # not the EngineCore's lines
    paths = [m["path"] for x in lines if (m := ACCESS.search(x))]
    assert paths == ["/v1/completions"]  # /health and /metrics excluded


def test_core_death_access_lines_only_for_requests_in_flight(tmp_path: Path) -> None:
    """The API server answers each in-flight request once (500, or the stream's 200); nothing made up."""
    n = 4
    with cli_engine(tmp_path, "--vllm-version", "0.11", "--sim-fault-endpoint", "--time-scale", "50") as eng:
        statuses: list[int] = []

        def send(stream: bool) -> None:
            body = {"prompt": "hi", "max_tokens": 500, "stream": stream}
            with httpx.Client(base_url=eng.url, timeout=60) as c, c.stream("POST", "/v1/completions", json=body) as r:
                r.read()
                statuses.append(r.status_code)

        threads = [threading.Thread(target=send, args=(i == 0,)) for i in range(n)]
        for t in threads:
            t.start()

        def running() -> bool:
            text = httpx.get(eng.url + "/metrics", timeout=10).text
            return any(x.startswith("vllm:num_requests_running{") and float(x.rsplit(" ", 1)[1]) == n
                       for x in text.splitlines())

        assert _eventually(running, 30)
        assert httpx.post(eng.url + "/sim/fault", json={"fault": "engine-death"}, timeout=10).status_code == 200
        for t in threads:
            t.join(30)
        eng.proc.wait(30)
        lines = eng.lines()
    assert sorted(statuses) == [200] + [500] * (n - 1)
    done = [m for x in lines if (m := ACCESS.search(x)) and m["path"] == "/v1/completions"]
    assert sorted(m["status"] for m in done) == ["200"] + ["500"] * (n - 1)
    assert len({m["port"] for m in done}) == n
    assert sum(x.endswith("Shutting down") for x in lines) == 1  # the API server's, not the core's too


def test_start_up_runs_in_the_engine_core_before_the_api_server_listens(tmp_path: Path) -> None:
    """With a modelled start-up the EngineCore child runs and logs the engine's phases under its own pid while the
    API server's port refuses connections; the API server writes its lines after the core is ready, then listens."""
    port = _free_port()
    log, ledger = tmp_path / "engine.log", tmp_path / "gpus.json"
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*DOCTOR, "sim", "engine", "m", *FAST, "--sim-startup-scale", "0.5", "--host",
                             "127.0.0.1", "--port", str(port), "--gpu-ledger", str(ledger), "--log-file", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    eng = Engine(proc, url, log, ledger)
    kids: list[psutil.Process] = []
    try:
        assert _eventually(lambda: log.exists() and "Initializing a V1 LLM engine" in log.read_text())
        assert _health(url) is None  # bound but not listening during start-up: refused
        kids = eng.children()
        assert _eventually(lambda: _health(url) == 200)
        lines = eng.lines()
        (core,) = kids
        assert {m.group(2) for line in lines if (m := CORE_PREFIX.search(line))} == {str(core.pid)}
        at = {key: next(i for i, line in enumerate(lines) if key in line)
              for key in ("Initializing a V1 LLM engine", "init engine (profile", "Starting vLLM",
                          "Application startup complete.")}
        assert list(at.values()) == sorted(at.values())
        assert f"pid={proc.pid})" in lines[at["Application startup complete."]]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for kid in kids:
            if kid.is_running():
                kid.kill()
