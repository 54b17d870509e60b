"""The doctor run as cron runs it, against sim engines over real HTTP at real rates.

`LoadThread` sends a deterministic mix of short prompts and long documents to one engine (open loop at a
rate, or a closed loop of clients that keeps a queue standing); `cron_runs` calls the real `doctor diagnose`
(`doctor.diagnose.main`, JSON output) every `interval_s` with one state directory, as a crontab line would,
and keeps every report. Nothing of the doctor is substituted: this drives the shipped code end to end.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from doctor.diagnose import main as diagnose_main


@dataclass(frozen=True)
class Mix:
    """What one engine is sent: every `long_every`-th request a long document, the rest short prompts."""

    rate_qps: float = 1.0  # open loop: requests started per second (ignored with clients)
    clients: int = 0  # closed loop: this many clients, each sending its next request as the last one ends
    long_every: int = 0  # 0: no long documents
    short_tokens: int = 120
    long_tokens: int = 6500
    max_tokens: int = 40


@dataclass
class LoadThread:
    """Background load on one engine until `stop()`; counts what was sent and answered."""

    url: str
    mix: Mix
    sent: int = 0
    answered: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _prompt(self, i: int) -> str:
        long = self.mix.long_every > 0 and i % self.mix.long_every == 0
        return "x " * (self.mix.long_tokens if long else self.mix.short_tokens)

    def _send(self, client: httpx.Client, i: int) -> None:
        try:
            r = client.post(self.url + "/v1/completions", json={
                "model": "m", "prompt": self._prompt(i), "max_tokens": self.mix.max_tokens, "ignore_eos": True})
            self.answered += 1
            if r.status_code != 200 and len(self.errors) < 20:
                self.errors.append(f"{r.status_code}: {r.text[:120]}")
        except httpx.HTTPError as exc:
            if len(self.errors) < 20:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _open_loop(self) -> None:
        with httpx.Client(timeout=300, trust_env=False, limits=httpx.Limits(max_connections=64)) as client:
            i = 0
            start = time.monotonic()
            while not self._stop.is_set():
                i += 1
                self.sent += 1
                t = threading.Thread(target=self._send, args=(client, i), daemon=True)
                t.start()
                self._stop.wait(max(0.0, start + i / self.mix.rate_qps - time.monotonic()))

    def _closed_loop(self, k: int) -> None:
        with httpx.Client(timeout=300, trust_env=False) as client:
            i = k
            while not self._stop.is_set():
                self.sent += 1
                self._send(client, i)
                i += self.mix.clients

    def start(self) -> LoadThread:
        targets: Sequence[Callable[[], None]]
        if self.mix.clients:
            targets = [lambda k=k: self._closed_loop(k) for k in range(self.mix.clients)]  # type: ignore[misc]
        else:
            targets = [self._open_loop]
        for target in targets:
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)


@dataclass(frozen=True)
class Run:
    """One cron run: when it started (wall clock), its exit code and its JSON report."""

    started: float
    code: int
    report: dict[str, Any]

    def findings(self, engine: str) -> list[dict[str, Any]]:
        return [f for f in self.report.get("findings", []) if f["engine"] == engine]

    def pending(self, engine: str) -> list[dict[str, Any]]:
        return [f for f in self.report.get("pending", []) if f["engine"] == engine]


def diagnose_once(args: Sequence[str]) -> Run:
    """One `doctor diagnose --format json` run in this process (what cron starts)."""
    out, err = io.StringIO(), io.StringIO()
    started = time.time()
    code = diagnose_main([*args, "--format", "json"], out=out, err=err)
    text = out.getvalue()
    report = json.loads(text) if text.strip() else {"error": err.getvalue()}
    return Run(started, code, report)


def cron_runs(args: Sequence[str], *, interval_s: float, duration_s: float,
              on_run: Callable[[Run], None] | None = None) -> list[Run]:
    """`doctor diagnose ARGS` every `interval_s` for `duration_s` (a run that overruns delays the next)."""
    runs: list[Run] = []
    start = time.monotonic()
    k = 0
    while time.monotonic() - start < duration_s:
        run = diagnose_once(args)
        runs.append(run)
        if on_run is not None:
            on_run(run)
        k += 1
        wait = start + k * interval_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    return runs


def first_run_with(runs: Sequence[Run], engine: str, playbooks: set[str]) -> Run | None:
    """The first run whose findings on `engine` include one of `playbooks`."""
    return next((r for r in runs if any(f["playbook"] in playbooks for f in r.findings(engine))), None)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SpawnedEngine:
    """A `doctor sim engine` process on loopback."""

    name: str
    url: str
    proc: Any

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def spawn_engine(name: str, argv: Sequence[str], *, gpu: int, ledger: str, timeout_s: float = 60.0) -> SpawnedEngine:
    """Start a sim engine as its own process (its own CPU, like a real one) and wait for /health."""
    import os
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    proc = subprocess.Popen([sys.executable, "-m", "doctor.cli", "sim", "engine", *argv, "--port", str(port),
                             "--host", "127.0.0.1", "--gpu-ledger", ledger],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                return SpawnedEngine(name, url, proc)
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"sim engine {name} did not come up on port {port} (exit {proc.poll()})")
        time.sleep(0.1)
