"""What the daemon's tests run on loopback: sim engines (their own processes), the real router, `doctor serve` as
its own process, and the helpers to feed and watch them. Waits are on conditions with generous deadlines, never
on how fast this machine is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from doctor.secrets import write_private
from router.config import RouterConfig
from router.server import RouterThread
from sim.testing import ALL_GRAPHED, FAST_START
from trials.live import LoadThread, Mix, SpawnedEngine, free_port, spawn_engine

ROOT = Path(__file__).resolve().parents[2]
ROUTER_TOKEN = "router-policy-token-for-tests"
API_TOKEN = "doctor-api-token-for-tests"
ENGINE = ["m", *ALL_GRAPHED, "--time-scale", "0.1", "--max-model-len", "32768", *FAST_START]
# Half the requests are 9000-token documents ("x " is one token to the sim, two characters to the router).
STORM = Mix(rate_qps=4.0, long_every=2, long_tokens=9000, short_tokens=100, max_tokens=16)
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], *, timeout_s: float = 120.0, every_s: float = 0.25) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (httpx.HTTPError, OSError, ValueError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what} (last: {last!r})"[:2000])


def audit(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextmanager
def engines(names: Sequence[str], tmp: Path, extra: Sequence[str] = ()) -> Iterator[dict[str, SpawnedEngine]]:
    """Sim engines as their own processes, one (simulated) GPU each."""
    out: dict[str, SpawnedEngine] = {}
    try:
        for gpu, name in enumerate(names):
            out[name] = spawn_engine(name, [*ENGINE, "--max-num-seqs", "8", *extra], gpu=gpu,
                                     ledger=str(tmp / "gpus.json"))
        yield out
    finally:
        for e in out.values():
            e.stop()


@contextmanager
def router(hot: str, cold: str) -> Iterator[RouterThread]:
    """The real router; its route threshold so high that 9000-token documents stay on the hot path (a mistake
    the doctor's emergency length limit contains), counting tokens exactly for the sim's prompts."""
    r = RouterThread(RouterConfig(hot=[hot], cold=[cold], policy_file="", port=0, route_threshold_tokens=16384,
                                  chars_per_token=2.0, health_interval_s=0.5), token=ROUTER_TOKEN).start()
    try:
        yield r
    finally:
        r.stop()


def policy(router_url: str) -> dict[str, Any]:
    r = httpx.get(router_url + "/router/policy", headers={"Authorization": f"Bearer {ROUTER_TOKEN}"},
                  timeout=5, trust_env=False)
    r.raise_for_status()
    doc: dict[str, Any] = r.json()
    return doc


def write_config(tmp: Path, *, hot: str, cold: str, router_url: str | None, mode: str = "auto",
                 interval_s: float = 2.0, port: int | None = None, serve_extra: str = "",
                 doctor_extra: str = "") -> Path:
    """doctor.toml for one deployment: hot and cold engines, the router, [serve] on a free port with a token."""
    write_private(tmp / "api-token", API_TOKEN + "\n")
    write_private(tmp / "router-token", ROUTER_TOKEN + "\n")
    port = port or free_port()
    text = (f'[doctor]\nstate_dir = "{tmp / "state"}"\nmode = "{mode}"\nwindow_s = "20s"\nmin_requests = 5\n'
            f'cooldown_s = "15m"\n{doctor_extra}\n'
            f'[serve]\nlisten = "127.0.0.1:{port}"\ninterval_s = {interval_s}\ntoken_file = "api-token"\n'
            f'{serve_extra}\n'
            # the operator keeps the route threshold: the emergency length limit is the first remedy
            '[thresholds.long_prompt_share]\nroute_threshold_factor_ratio = 1.0\n\n'
            f'[[engines]]\nname = "hot"\nrole = "hot"\nurl = "{hot}"\nmax_model_len = 32768\n\n'
            f'[[engines]]\nname = "cold"\nrole = "cold"\nurl = "{cold}"\nmax_model_len = 32768\n')
    if router_url:
        text += f'\n[router]\nurl = "{router_url}"\ntoken_file = "router-token"\n'
    path = tmp / "doctor.toml"
    path.write_text(text)
    return path


@dataclass
class Daemon:
    """`doctor serve --config CONFIG` as its own process."""

    config: Path
    url: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str] | None = None, *, ready: bool = True) -> Daemon:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "doctor.cli", "serve", "--config", str(self.config)],
                                         stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        if ready:
            try:
                wait_for("the daemon to be ready", lambda: self.alive() and self.get("/readyz").status_code == 200,
                         timeout_s=90)
            except BaseException:
                self.stop()
                raise
        return self

    def alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"doctor serve exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        return True

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=10, trust_env=False)

    def post(self, path: str, content: bytes | None = None, *, token: str | None = API_TOKEN,
             json_body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(self.url + path, content=content, json=json_body, headers=headers, timeout=30,
                          trust_env=False)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait_exit(self, timeout_s: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def rss_bytes(self) -> int:
        import psutil

        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)


def daemon_for(config: Path, tmp: Path) -> Daemon:
    from doctor.config import load_config

    return Daemon(config, f"http://{load_config(config).serve.listen}", tmp / "serve.log")


def seed_for_state(state_dir: Path, key: str, held_s: float) -> None:
    """The playbooks' `for` state as earlier runs leave it: the condition `key` (playbook|engine) has held for
    `held_s` (so a test need not wait out a playbook's `for`)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "playbooks.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    now = time.time()
    doc[key] = {"onset": now - held_s, "last": now}
    path.write_text(json.dumps(doc))


def load(url: str, mix: Mix = STORM) -> LoadThread:
    return LoadThread(url, mix).start()
