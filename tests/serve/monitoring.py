"""Debian's Prometheus and Alertmanager on loopback for the daemon's end-to-end test: configs written and checked
(promtool, amtool), servers started as processes and stopped by PID. The test fails (never skips) without them:
scripts/ensure-debian-packages.sh installs them."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.serve.stack import ROOT, wait_for
from trials.live import free_port

SHIPPED_RULES = ROOT / "deploy" / "prometheus" / "rules.yml"


def binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    pytest.fail(f"{' or '.join(names)} is not installed: run `make test` (scripts/ensure-debian-packages.sh "
                "installs Debian's prometheus and prometheus-alertmanager)")


def shipped_rule(alertname: str, *, rate_window: str, for_: str) -> str:
    """One alerting rule of deploy/prometheus/rules.yml, as shipped but for its rate window and `for` (shortened
    so a test runs in a minute, not in ten)."""
    text = SHIPPED_RULES.read_text()
    m = re.search(rf"^( +)- alert: {alertname}\n.*?(?=^\1- alert: |^\1# |\Z)", text, re.M | re.S)
    assert m is not None, f"no rule {alertname} in {SHIPPED_RULES}"
    rule = m.group(0)
    assert "[5m]" in rule and re.search(r"^ +for: ", rule, re.M), rule
    rule = rule.replace("[5m]", f"[{rate_window}]")
    rule = re.sub(r"^( +)for: .*$", rf"\g<1>for: {for_}", rule, flags=re.M)
    return "groups:\n  - name: serving-doctor\n    rules:\n" + rule


def check(cmd: Sequence[str]) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(cmd)}: {proc.stdout}{proc.stderr}"


@contextmanager
def process(cmd: Sequence[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{cmd[0]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            return httpx.get(ready_url, timeout=2, trust_env=False).status_code == 200

        wait_for(f"{cmd[0]} to be ready", ready, timeout_s=60)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def alertmanager(work: Path, receivers: Mapping[str, tuple[str, str, Path]], *,
                 port: int | None = None) -> Iterator[str]:
    """Alertmanager routing each engine's alerts (by `instance`) to its daemon's webhook, with the bearer token
    read from a file: receivers = {name: (instance, webhook URL, token file)}, on `port` (default a free one).
    Yields its URL."""
    routes = "".join(f"    - matchers: ['instance=\"{inst}\"']\n      receiver: {name}\n"
                     for name, (inst, _, _) in receivers.items())
    hooks = "".join(f"  - name: {name}\n    webhook_configs:\n      - url: {url}\n        send_resolved: true\n"
                    f"        http_config:\n          authorization:\n            type: Bearer\n"
                    f"            credentials_file: {token}\n"
                    for name, (_, url, token) in receivers.items())
    config = work / "alertmanager.yml"
    config.write_text("route:\n  receiver: nobody\n  group_by: [alertname, instance]\n  group_wait: 1s\n"
                      f"  group_interval: 2s\n  repeat_interval: 1h\n  routes:\n{routes}"
                      f"receivers:\n  - name: nobody\n{hooks}")
    check([binary("amtool"), "check-config", str(config)])
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [binary("prometheus-alertmanager", "alertmanager"), f"--config.file={config}",
           f"--storage.path={work / 'am-data'}", f"--web.listen-address=127.0.0.1:{port}",
           "--cluster.listen-address=", f"--web.external-url={url}"]
    with process(cmd, work / "alertmanager.log", url + "/-/ready"):
        yield url


@contextmanager
def prometheus(work: Path, *, engines: Sequence[str], doctors: Sequence[str], rules: str,
               alertmanager_url: str) -> Iterator[str]:
    """Prometheus scraping the engines (job vllm, as the shipped rules select) and the daemons every second,
    evaluating `rules` every second and sending to Alertmanager. Yields its URL."""
    (work / "rules.yml").write_text(rules)
    am = alertmanager_url.removeprefix("http://")
    config = work / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [rules.yml]\n"
                      f"alerting:\n  alertmanagers: [{{static_configs: [{{targets: ['{am}']}}]}}]\n"
                      "scrape_configs:\n"
                      f"  - job_name: vllm\n    static_configs: [{{targets: {list(engines)}}}]\n"
                      f"  - job_name: doctor\n    static_configs: [{{targets: {list(doctors)}}}]\n")
    promtool = binary("promtool")
    check([promtool, "check", "rules", str(work / "rules.yml")])
    check([promtool, "check", "config", str(config)])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={work / 'prom-data'}",
           f"--web.listen-address=127.0.0.1:{port}", f"--web.external-url={url}"]
    with process(cmd, work / "prometheus.log", url + "/-/ready"):
        yield url
