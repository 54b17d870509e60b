"""`doctor sim engine` as a real process: flags, start-up failures, shared GPUs, logs, signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sim.testing import FAST_START, fast_start

DOCTOR = [sys.executable, "-m", "doctor.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DOCTOR, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("args", "needle"), [
    (["sim", "engine", "m", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
    (["sim", "engine", "m", "--vllm-version", "0.99"], "unknown vLLM version profile '0.99'"),
    (["sim", "engine", "m", "--preset", "nope"], "unknown preset 'nope'"),
    (["sim", "engine", "m", "--max-num-seqs", "zero"], "invalid int value: 'zero'"),
    (["sim", "engine", "m", "--fault", "meteor"], "unknown fault 'meteor'"),
    (["sim", "engine"], "a model is required"),
    (["sim", "nonsense"], "unknown command 'nonsense'"),
])
def test_bad_flags_exit_2_without_traceback(args: list[str], needle: str) -> None:
    r = _run(args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def _start(args: list[str], tmp_path: Path, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    log = open(tmp_path / f"{name}.out", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([*DOCTOR, "sim", "engine", *fast_start(args)], stdout=log, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **(env or {})})


def _wait_healthy(url: str, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "engine exited early"
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("engine did not become healthy")


def test_second_engine_on_same_gpu_fails_like_vllm(tmp_path: Path) -> None:
    ledger = str(tmp_path / "gpus.json")
    port_a = _free_port()
    common = ["--gpu-ledger", ledger, "--gpu-memory-utilization", "0.6", "--max-model-len", "4096",
              "--host", "127.0.0.1"]
    a = _start(["m", "--port", str(port_a), "--log-file", str(tmp_path / "a.log"), *common], tmp_path, "a",
               env={"CUDA_VISIBLE_DEVICES": "0"})
    try:
        _wait_healthy(f"http://127.0.0.1:{port_a}", a)
        for _ in range(5):  # a free port can be taken by another process before the engine binds it: another
            b = subprocess.run([*DOCTOR, "sim", "engine", "m", "--port", str(_free_port()), *common, *FAST_START],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
            if "Address already in use" not in b.stderr:
                break
        assert b.returncode == 1
        assert "Free memory on device" in b.stdout and "is less than desired GPU memory utilization" in b.stdout
        assert "Traceback (most recent call last)" not in b.stderr
        # Another GPU is free.
        c = _start(["m", "--port", str(port_c := _free_port()), *common], tmp_path, "c",
                   env={"CUDA_VISIBLE_DEVICES": "1"})
        try:
            _wait_healthy(f"http://127.0.0.1:{port_c}", c)
        finally:
            c.send_signal(signal.SIGTERM)
            c.wait(20)
    finally:
        a.send_signal(signal.SIGTERM)
        assert a.wait(20) == 0
    log = (tmp_path / "a.log").read_text()
    assert "Starting vLLM server on http://127.0.0.1:" in log
    # Once A is gone its memory is free again.
    d = _start(["m", "--port", str(port_d := _free_port()), *common], tmp_path, "d", env={"CUDA_VISIBLE_DEVICES": "0"})
    try:
        _wait_healthy(f"http://127.0.0.1:{port_d}", d)
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(20)


def test_cuda_oom_at_start_exits_1(tmp_path: Path) -> None:
    r = _run(["sim", "engine", "m", "--fault", "cuda-oom-start", "--gpu-ledger", str(tmp_path / "g.json"),
              "--port", str(_free_port()), "--host", "127.0.0.1"])
    assert r.returncode == 1
    assert "CUDA out of memory" in r.stdout
    assert "Traceback (most recent call last)" not in r.stderr
