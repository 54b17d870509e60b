"""Escalation against a real Alertmanager (Debian's prometheus-alertmanager on loopback) and a webhook."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from doctor.remedy.escalate import ALERT_NAME, Escalation, EscalationError, escalate

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if BINARY is None:
        pytest.fail("prometheus-alertmanager is not installed: run `make test` (it installs Debian's package)")
    work = tmp_path_factory.mktemp("am")
    (work / "am.yml").write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
    port = _free_port()
    log = open(work / "am.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([BINARY, f"--config.file={work / 'am.yml'}", f"--storage.path={work / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if httpx.get(url + "/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"alertmanager did not start:\n{(work / 'am.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


ESC = Escalation(summary="kv_pressure on hot: relaunch did not help, rolled back", engine="hot",
                 playbook="kv_pressure", action="relaunch", action_status="rolled_back",
                 evidence="kv_cache_usage = 0.97 (> 0.75 over 300s)", runbook="docs/runbooks.md#kv-pressure",
                 finding_id="fnd-0123456789abcdef")


def test_escalation_reaches_alertmanager(alertmanager: str) -> None:
    assert escalate(ESC, alertmanager_url=alertmanager, webhook_url=None) == "alertmanager"
    alerts = httpx.get(alertmanager + "/api/v2/alerts", params={"filter": f'alertname="{ALERT_NAME}"'}).json()
    [alert] = [a for a in alerts if a["labels"].get("engine") == "hot"]
    assert alert["labels"]["playbook"] == "kv_pressure" and alert["labels"]["action_status"] == "rolled_back"
    assert alert["annotations"]["runbook_url"] == "docs/runbooks.md#kv-pressure"
    assert alert["status"]["state"] == "active"


def test_falls_back_to_webhook_then_says_why_it_failed(tmp_path: Path) -> None:
    got: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v2/alerts":
            return httpx.Response(503, text="down for maintenance")
        got.append(request.read().decode())  # type: ignore[arg-type]
        return httpx.Response(200)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    assert escalate(ESC, alertmanager_url="http://am:9093", webhook_url="http://hook/x", client=client) == "webhook"
    assert got and '"engine": "hot"' in got[0].replace('":"', '": "')
    with pytest.raises(EscalationError, match=r"no \[escalation\]"):
        escalate(ESC, alertmanager_url=None, webhook_url=None)
    with pytest.raises(EscalationError, match=r"connection|Connect"):
        escalate(ESC, alertmanager_url=f"http://127.0.0.1:{_free_port()}", webhook_url=None)
