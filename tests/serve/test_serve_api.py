"""`doctor serve` against healthy sim engines and the real router: alerts that the doctor's reading does not
confirm are answered and audited and nothing acts; the API's reads, credentials, limits and events; the CLI's
`--daemon`. One deployment for the module."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from doctor.actions_cli import main_for
from tests.serve.payloads import alert, body
from tests.serve.stack import API_TOKEN, Daemon, audit, daemon_for, engines, policy, router, wait_for, write_config

pytestmark = pytest.mark.timeout(300)


@dataclass
class Deployment:
    daemon: Daemon
    state: Path
    router_url: str
    hot: str
    tmp: Path


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = Path(tmp_path_factory.mktemp("serve-api"))
    with engines(["hot", "cold"], tmp) as eng, router(eng["hot"].url, eng["cold"].url) as r:
        config = write_config(tmp, hot=eng["hot"].url, cold=eng["cold"].url, router_url=r.url,
                              serve_extra="body_limit_bytes = 4096\nqueue_size = 50\n")
        daemon = daemon_for(config, tmp).start()
        try:
            yield Deployment(daemon, tmp / "state", r.url, eng["hot"].url, tmp)
        finally:
            daemon.stop()


def lines(d: Deployment, event: str, fingerprint: str) -> list[dict[str, object]]:
    return [e for e in audit(d.state) if e.get("event") == event and e.get("fingerprint") == fingerprint]


def test_an_alert_the_reading_does_not_confirm_is_answered_audited_and_nothing_acts(d: Deployment) -> None:
    instance = d.hot.removeprefix("http://")
    r = d.daemon.post("/v1/alerts", body(alert("feed01", instance=instance)))
    assert r.status_code == 200 and r.json()["accepted"] == 1
    [line] = wait_for("the alert judged", lambda: lines(d, "alert_not_confirmed", "feed01"))
    assert line["engine"] == "hot" and line["playbook"] == "long_prompt_share"
    assert "does not show long_prompt_share on hot" in str(line["reason"]) and line["trigger"] == "alert:feed01"
    assert lines(d, "alert_received", "feed01")
    assert not [e for e in audit(d.state) if e.get("event") in ("begin", "applied", "queued")]
    assert policy(d.router_url)["length_limit_tokens"] is None
    again = d.daemon.post("/v1/alerts", body(alert("feed01", instance=instance)))
    assert again.json() == {"accepted": 0, "duplicates": 1, "truncatedAlerts": 0, "queue_depth": 0}


def test_an_alert_for_no_known_engine_or_playbook_is_recorded_and_never_acted_on(d: Deployment) -> None:
    r = d.daemon.post("/v1/alerts", body(alert("beef01", instance="10.9.9.9:8000"),
                                         alert("beef02", instance=d.hot.removeprefix("http://"), playbook="nope"),
                                         truncated=4))
    assert r.status_code == 200 and r.json()["truncatedAlerts"] == 4
    [a] = wait_for("unmapped", lambda: lines(d, "alert_unmapped", "beef01"))
    [b] = wait_for("unmapped", lambda: lines(d, "alert_unmapped", "beef02"))
    assert "no configured engine matches" in str(a["reason"]) and "unknown playbook 'nope'" in str(b["reason"])
    assert any(e["event"] == "alerts_truncated" and e["truncated_alerts"] == 4 for e in audit(d.state))


def test_a_resolved_alert_is_audited(d: Deployment) -> None:
    instance = d.hot.removeprefix("http://")
    assert d.daemon.post("/v1/alerts", body(alert("feed02", status="resolved", instance=instance))).status_code == 200
    [line] = wait_for("resolved", lambda: lines(d, "alert_resolved", "feed02"))
    assert line["ended_wait"] is False


def test_credentials_limits_and_bad_bodies_get_4xx_with_the_reason(d: Deployment) -> None:
    good = body(alert("feed03", instance="10.9.9.9:8000"))
    assert d.daemon.post("/v1/alerts", good, token=None).status_code == 401
    assert d.daemon.post("/v1/alerts", good, token="wrong").status_code == 401
    big = d.daemon.post("/v1/alerts", b"{" + b" " * 5000 + b"}")
    assert big.status_code == 413 and "4096" in big.json()["error"]
    bad = d.daemon.post("/v1/alerts", b'{"version": "4", "status": "firing", "alerts": [{"status": "x"}]}')
    assert bad.status_code == 400 and "alerts[0]" in bad.json()["error"]
    assert d.daemon.post("/v1/alerts", b"\x00garbage").status_code == 400
    assert d.daemon.post("/v1/actions/run-x/approve", json_body={}, token=None).status_code == 401
    assert d.daemon.post("/v1/actions/run-x/approve", json_body={}, token="wrong").status_code == 401
    unknown = d.daemon.post("/v1/actions/run-nothing/approve", json_body={"who": "alice"})
    assert unknown.status_code == 404 and unknown.json()["result"] == "unknown"
    assert d.daemon.post("/v1/actions/run-x/explode", json_body={}).status_code == 404


def test_state_metrics_and_health(d: Deployment) -> None:
    state = d.daemon.get("/v1/state").json()
    assert [e["name"] for e in state["engines"]] == ["hot", "cold"]
    hot = state["engines"][0]
    assert hot["reachable"] is True and "qps" in hot["signals"] and "qps" in hot["history"]
    assert state["router"]["policy"]["route_threshold_tokens"] == 16384
    assert set(state["actions"]) == {"pending", "recent"} and state["cycles"] >= 1
    assert d.daemon.get("/healthz").status_code == 200 and d.daemon.get("/readyz").json()["ready"] is True
    text = d.daemon.get("/metrics").text
    for name in ("doctor_cycle_duration_seconds_count", "doctor_alerts_total", "doctor_alert_queue_depth",
                 "doctor_alert_posts_total", "doctor_cycles_total"):
        assert name in text, name


def test_events_stream_state_changes(d: Deployment) -> None:
    seen: list[str] = []

    def read() -> None:
        with httpx.stream("GET", d.daemon.url + "/v1/events", timeout=30, trust_env=False) as r:
            for line in r.iter_lines():
                seen.append(line)
                if line.startswith("data: ") and "event: cycle" in seen:
                    return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(60)
    assert any(line.startswith("event: cycle") for line in seen), seen
    data = json.loads(seen[-1][6:])
    assert {"status", "findings", "pending", "actions", "seq"} <= set(data)


def test_the_cli_talks_to_the_daemon(d: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main_for("actions", ["--daemon", d.daemon.url, "--format", "json"], out, err) == 0, err.getvalue()
    assert json.loads(out.getvalue()) == {"pending": [], "recent": []}
    monkeypatch.delenv("DOCTOR_SERVE_TOKEN", raising=False)
    assert main_for("approve", ["run-nothing", "--daemon", d.daemon.url], out, err) == 3
    assert "HTTP 401" in err.getvalue() and "--token-file" in err.getvalue()
    monkeypatch.setenv("DOCTOR_SERVE_TOKEN", API_TOKEN)
    err = io.StringIO()
    assert main_for("approve", ["run-nothing", "--daemon", d.daemon.url], out, err) == 3
    assert "no action with id" in err.getvalue()
    assert main_for("actions", ["--daemon", "http://127.0.0.1:9"], out, err) == 3
    assert "cannot reach the daemon" in err.getvalue()


@pytest.fixture
def d(deployment: Deployment) -> Deployment:
    return deployment


def test_doctor_serve_refuses_to_start_with_a_clear_error(d: Deployment, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from doctor.serve.main import main
    from trials.live import free_port

    config = d.daemon.config
    assert main(["--config", str(config)]) == 3
    assert "cannot listen on" in capsys.readouterr().err  # the running daemon has the port
    assert main(["--config", str(config), "--listen", f"127.0.0.1:{free_port()}"]) == 3
    assert "another doctor serve uses" in capsys.readouterr().err  # ... and the state directory
    bad = tmp_path / "bad.toml"
    bad.write_text('[serve]\ninterval_s = "soon"\n')
    assert main(["--config", str(bad)]) == 3
    assert "bad.toml:2: serve.interval_s" in capsys.readouterr().err
    missing = tmp_path / "missing.toml"
    missing.write_text(config.read_text().replace('token_file = "api-token"', 'token_file = "nope"'))
    assert main(["--config", str(missing)]) == 3
    err = capsys.readouterr().err
    assert "cannot read" in err and "nope" in err
    assert main(["--config", str(config), "--listen", "0.0.0.0"]) == 3
    assert "expected HOST:PORT" in capsys.readouterr().err
