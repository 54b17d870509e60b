"""Fixtures for the collectors' tests: a real Prometheus server (Debian's package) on loopback."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import httpx
import pytest

PROMETHEUS_MISSING = (
    "the `prometheus` binary is not on PATH; run `make test`, which installs Debian's prometheus package "
    "(scripts/ensure-debian-packages.sh), or `apt-get install --no-install-recommends prometheus`"
)
SCRAPE_INTERVAL_S = 1.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    """The prometheus binary, or a test failure (never a skip) telling how to install it."""
    path = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin:/usr/sbin:/usr/local/bin")
    if path is None:
        pytest.fail(PROMETHEUS_MISSING, pytrace=False)
    return path


class PrometheusServer:
    """A running Prometheus: its URL, its log file, and helpers to wait on scrapes."""

    scrape_interval_s = SCRAPE_INTERVAL_S

    def __init__(self, url: str, log_path: Path, proc: subprocess.Popen[bytes]) -> None:
        self.url = url
        self.log_path = log_path
        self.proc = proc

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no Prometheus log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def query(self, promql: str, timeout_s: float = 5.0) -> list[dict[str, object]]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=timeout_s)
        r.raise_for_status()
        result: list[dict[str, object]] = r.json()["data"]["result"]
        return result

    def last_scrape(self, instance: str) -> float | None:
        """The timestamp of the newest scrape of `instance` that Prometheus has stored (None before the first)."""
        # timestamp() of a bare selector is the sample's own (scrape) time; of any expression, the query time.
        up = f'up{{instance="{instance}"}}'
        rows = self.query(f"timestamp({up}) and {up} == 1")
        if not rows:
            return None
        value = rows[0]["value"]
        assert isinstance(value, list)
        return float(value[1])

    def wait_scrapes_after(self, instances: Sequence[str], after: float, count: int = 2,
                           timeout_s: float = 60.0) -> dict[str, float]:
        """Wait (bounded) until each instance has been scraped `count` times after `after`; its last scrape times."""
        deadline = time.monotonic() + timeout_s
        seen: dict[str, set[float]] = {i: set() for i in instances}
        while True:
            for inst in instances:
                ts = self.last_scrape(inst)
                if ts is not None and ts > after:
                    seen[inst].add(ts)
            if all(len(s) >= count for s in seen.values()):
                return {i: max(s) for i, s in seen.items()}
            if self.proc.poll() is not None:
                raise AssertionError(f"Prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                counts = {i: len(s) for i, s in seen.items()}
                raise AssertionError(f"Prometheus did not scrape {count}x after t={after:.3f} within {timeout_s}s "
                                     f"(scrapes seen: {counts}):\n{self.log_tail()}")
            time.sleep(SCRAPE_INTERVAL_S / 5)


def _write_config(path: Path, targets: Sequence[str], scrape_configs: str | None = None) -> None:
    quoted = ", ".join(f'"{t}"' for t in targets)
    jobs = scrape_configs if scrape_configs is not None else (
        "  - job_name: sim\n"
        f"    static_configs: [{{targets: [{quoted}]}}]\n")
    path.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL_S:g}s\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL_S:g}s\n"
        f"  evaluation_interval: {SCRAPE_INTERVAL_S:g}s\n"
        "scrape_configs:\n" + jobs
    )


@contextmanager
def run_prometheus(workdir: Path, targets: Sequence[str], *, ready_timeout_s: float = 30.0,
                   scrape_configs: str | None = None) -> Iterator[PrometheusServer]:
    """Start `prometheus` on a free loopback port scraping `targets` (host:port) every second (or the jobs of
    `scrape_configs`, YAML list items) with what `workdir/data` already holds (a backfill); stop it after."""
    binary = prometheus_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    _write_config(config, targets, scrape_configs)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--web.external-url={url}",
             "--query.lookback-delta=10s", "--storage.tsdb.retention.time=1h"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    server = PrometheusServer(url, log_path, proc)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Prometheus exited with {proc.returncode} at start:\n{server.log_tail()}", pytrace=False)
            try:
                if httpx.get(f"{url}/-/ready", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"Prometheus not ready within {ready_timeout_s}s:\n{server.log_tail()}", pytrace=False)
            time.sleep(0.05)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def prometheus_launcher() -> Callable[..., AbstractContextManager[PrometheusServer]]:
    """`run_prometheus` (fails, never skips, when the binary is missing): launcher(workdir, targets)."""
    prometheus_binary()
    return run_prometheus


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    """On a failure in a test that used a Prometheus server, attach the tail of its log to the report."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            server = value if isinstance(value, PrometheusServer) else getattr(value, "prometheus", None)
            if isinstance(server, PrometheusServer):
                report.sections.append(("Prometheus log (tail)", server.log_tail(80)))
