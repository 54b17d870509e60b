"""The router dies in front of healthy engines: Alertmanager's RouterDown (the shipped rule, the router's own
host:port as its instance) reaches the daemon, which confirms it with its own reading (router_down, critical, on the
first engine by name) and pages a person; in observe mode nothing else is done."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.payloads import alert, body
from tests.serve.stack import audit, daemon_for, engines, wait_for, write_config
from trials.live import free_port

pytestmark = pytest.mark.timeout(240)


def test_router_down_alert_is_confirmed_on_the_first_engine(tmp_path: Path) -> None:
    state = tmp_path / "state"
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: the router is down
    with engines(["hot", "cold"], tmp_path) as eng:
        config = write_config(tmp_path, hot=eng["hot"].url, cold=eng["cold"].url, router_url=f"http://{dead}",
                              mode="observe", interval_s=3600)
        daemon = daemon_for(config, tmp_path).start()
        try:
            post = body(alert("router01", alertname="RouterDown", instance=dead, job="router",
                              playbook="router_down", severity="critical"))
            assert daemon.post("/v1/alerts", post).json()["accepted"] == 1
            [line] = wait_for("the alert judged", lambda: [e for e in audit(state) if e.get("fingerprint")
                                                           == "router01" and e["event"].startswith("alert_")
                                                           and e["event"] not in ("alert_received",)])
            assert line["event"] == "alert_confirmed", line
            assert (line["engine"], line["playbook"], line["severity"]) == ("cold", "router_down", "critical"), line
            assert dead in line["summary"] and "requests sent through it fail" in line["summary"], line
        finally:
            daemon.stop()
