"""`doctor serve` as its own process, started under umask 000, serving TLS: every state-changing call needs its
token; hostile alert labels are recorded as unknown engines and nothing runs; secrets are redacted in the audit
log, the API, the log and the TUI; the state directory is 0700 and its files 0600; header, body and framing
limits; the CLI and the TUI verify the certificate; beyond loopback it warns."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from doctor.actions_cli import main_for
from router.secrets import write_private
from tests.security.helpers import (
    ROOT,
    body_of,
    client_context,
    exchange,
    free_port,
    listening,
    process,
    selfsigned,
    status_of,
    wait_until,
)
from tests.serve.payloads import alert, body

pytestmark = pytest.mark.timeout(180)
WRITE, READ = "write-t0ken-0123456789abcdef", "read-t0ken-0123456789abcdef"
ENGINE_PASSWORD = "s3cretpw-engine"
LIMIT = 4096


@dataclass
class Daemon:
    url: str
    port: int
    tmp: Path
    state: Path
    log: Path
    cert: Path

    def call(self, method: str, path: str, token: str | None = None, **kw: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.request(method, self.url + path, headers=headers, verify=client_context(self.cert),
                             trust_env=False, timeout=30, **kw)  # type: ignore[arg-type]

    def audit(self) -> list[dict[str, object]]:
        path = self.state / "audit.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _config(tmp: Path, port: int) -> Path:
    cert, key = selfsigned(tmp)
    write_private(tmp / "api-token", WRITE + "\n")
    write_private(tmp / "read-token", READ + "\n")
    closed = free_port()
    path = tmp / "doctor.toml"
    path.write_text(
        f'[doctor]\nstate_dir = "{tmp / "deep" / "state"}"\nmode = "auto"\n\n'
        f'[serve]\nlisten = "127.0.0.1:{port}"\ninterval_s = 1\ntoken_file = "api-token"\n'
        f'read_token_file = "read-token"\ntls_cert_file = "{cert.name}"\ntls_key_file = "{key.name}"\n'
        f'header_limit_bytes = {LIMIT}\nbody_limit_bytes = {LIMIT}\n\n'
        f'[[engines]]\nname = "hot"\nrole = "hot"\nurl = "http://127.0.0.1:{closed}"\n\n'
        f'[[engines]]\nname = "cold"\nrole = "cold"\nurl = "http://doctor:{ENGINE_PASSWORD}@127.0.0.1:{closed}"\n')
    return path


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = Path(tmp_path_factory.mktemp("serve-sec"))
    port, log = free_port(), tmp / "serve.log"
    config = _config(tmp, port)
    d = Daemon(f"https://127.0.0.1:{port}", port, tmp, tmp / "deep" / "state", log, tmp / "cert.pem")
    with process(["-m", "doctor.cli", "serve", "--config", str(config)], log, umask=0o000) as proc:
        wait_until("the daemon ready", lambda: d.call("GET", "/readyz").status_code == 200, proc, log, 90)
        yield d


def test_every_state_changing_call_needs_its_token(daemon: Daemon) -> None:
    good = body(alert("5ec0001", instance="nowhere:1"))
    for token in (None, "wrong", WRITE + "x", READ):
        assert daemon.call("POST", "/v1/alerts", token, content=good).status_code == 401, token
        r = daemon.call("POST", "/v1/actions/run-nope/approve", token, json={})
        assert r.status_code == 401 and "bearer token" in r.json()["error"], token
        for verb in ("reject", "rollback"):
            assert daemon.call("POST", f"/v1/actions/run-nope/{verb}", token, json={}).status_code == 401
    assert daemon.call("POST", "/v1/actions/run-nope/approve", WRITE, json={}).status_code == 404
    assert daemon.call("POST", "/v1/alerts", WRITE, content=good).status_code == 200
    assert daemon.call("GET", "/v1/state").status_code == 401  # read_token_file is set: reads need it too
    assert daemon.call("GET", "/v1/state", READ).status_code == 200


HOSTILE = {"instance": "$(touch {tmp}/pwned-instance)", "engine": "hot; touch {tmp}/pwned-engine",
           "job": "`touch {tmp}/pwned-job`", "severity": "x\n$(touch {tmp}/pwned-newline)\n",
           "namespace": "'; rm -rf {tmp}/canary; echo '"}


def test_hostile_alert_labels_are_unknown_engines_and_nothing_runs(daemon: Daemon) -> None:
    (daemon.tmp / "canary").mkdir()
    labels = {k: v.format(tmp=daemon.tmp) for k, v in HOSTILE.items()}
    hostile = alert("bad0001", instance=labels.pop("instance"), alertname="Vllm`id`$(id)", **labels)
    assert daemon.call("POST", "/v1/alerts", WRITE, content=body(hostile)).status_code == 200

    def unmapped() -> bool:
        return any(e.get("event") == "alert_unmapped" and e.get("fingerprint") == "bad0001" for e in daemon.audit())

    wait_until("the hostile alert recorded", unmapped, None, daemon.log, 60)
    [line] = [e for e in daemon.audit() if e.get("event") == "alert_unmapped" and e.get("fingerprint") == "bad0001"]
    assert line["engine"] is None and "no configured engine matches its labels" in str(line["reason"])
    assert repr(f"$(touch {daemon.tmp}/pwned-instance)") in str(line["reason"])  # the literal string, recorded
    assert line["alertname"] == "Vllm`id`$(id)"
    assert not list(daemon.tmp.glob("pwned*")) and (daemon.tmp / "canary").is_dir()


def test_secrets_are_redacted_in_the_audit_log_the_api_the_log_and_the_tui(daemon: Daemon) -> None:
    leaky = alert("5ec0002", instance="password=hunter2-from-alert",
                  engine="http://am:hunter3-basic@alertmanager:9093")
    assert daemon.call("POST", "/v1/alerts", WRITE, content=body(leaky)).status_code == 200
    wait_until("the alert recorded", lambda: any(e.get("fingerprint") == "5ec0002" and e.get("event") ==
                                                 "alert_unmapped" for e in daemon.audit()),
               None, daemon.log, 60)
    audit = (daemon.state / "audit.jsonl").read_text()
    assert "[redacted]" in audit
    state = daemon.call("GET", "/v1/state", READ).text
    assert "127.0.0.1" in state and "[redacted]@127.0.0.1" in state  # the engine's URL, its password hidden
    tui = subprocess.run([sys.executable, "-m", "doctor.cli", "tui", "--daemon", daemon.url, "--token-file",
                          str(daemon.tmp / "read-token"), "--ca-file", str(daemon.cert), "--once"],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         timeout=120)
    assert tui.returncode in (0, 1, 2), tui.stderr[-2000:]  # the fleet's status (its engines are down)
    assert "hot" in tui.stdout and "cold" in tui.stdout
    for text in (audit, state, daemon.log.read_text(), tui.stdout, tui.stderr):
        for secret in (WRITE, READ, ENGINE_PASSWORD, "hunter2-from-alert", "hunter3-basic"):
            assert secret not in text


def test_the_state_directory_is_0700_and_its_files_0600_under_umask_000(daemon: Daemon) -> None:
    wait_until("the inbox and audit written", lambda: (daemon.state / "audit.jsonl").exists() and
               len(list(daemon.state.iterdir())) >= 3, None, daemon.log, 60)
    assert stat.S_IMODE(daemon.state.stat().st_mode) == 0o700
    assert stat.S_IMODE((daemon.tmp / "deep").stat().st_mode) == 0o700  # made by the daemon, private too
    seen = []
    for path in [daemon.state, *daemon.state.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {mode:04o}"
        seen.append(path.name)
    assert {"audit.jsonl", "serve.lock"} <= set(seen), seen


def test_header_body_and_framing_limits(daemon: Daemon) -> None:
    tls = client_context(daemon.cert)
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 * LIMIT) + b"\r\n\r\n"
    response, closed = exchange(daemon.port, big, tls=tls)
    assert status_of(response) == 431 and closed and str(LIMIT) in str(body_of(response)["error"])
    smuggle = (b"POST /v1/alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + WRITE.encode() +
               b"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    response, closed = exchange(daemon.port, smuggle, tls=tls)
    assert status_of(response) == 400 and closed, response[:300]
    r = daemon.call("POST", "/v1/alerts", WRITE, content=b"{" + b" " * (LIMIT + 10) + b"}")
    assert r.status_code == 413 and str(LIMIT) in r.json()["error"]
    r = daemon.call("POST", "/v1/actions/run-x/approve", WRITE, content=b"{" + b" " * 70000 + b"}")
    assert r.status_code == 413 and "limit" in r.json()["error"]


def test_the_cli_verifies_the_certificate_and_refuses_a_loose_token_file(daemon: Daemon) -> None:
    out, err = io.StringIO(), io.StringIO()
    args = ["nope", "--daemon", daemon.url, "--token-file", str(daemon.tmp / "api-token")]
    assert main_for("approve", [*args, "--ca-file", str(daemon.cert)], out, err) == 3
    assert "no action" in err.getvalue().lower() or "unknown" in err.getvalue().lower(), err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert main_for("approve", args, out, err) == 3  # without the CA: the certificate is not trusted
    assert "certificate" in err.getvalue().lower(), err.getvalue()
    loose = daemon.tmp / "loose-token"
    loose.write_text(WRITE)
    loose.chmod(0o644)
    for argv in (["approve", "nope", "--daemon", daemon.url, "--token-file", str(loose)],
                 ["tui", "--daemon", daemon.url, "--token-file", str(loose), "--once"]):
        r = subprocess.run([sys.executable, "-m", "doctor.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert r.returncode == 3 and f"{loose} has mode 0644" in r.stderr and "Traceback" not in r.stderr, argv


def test_beyond_loopback_it_warns_loudly(daemon: Daemon) -> None:
    port, log = free_port(), daemon.tmp / "exposed.log"
    argv = ["-m", "doctor.cli", "serve", "--config", str(daemon.tmp / "doctor.toml"), "--listen", f"0.0.0.0:{port}",
            "--state-dir", str(daemon.tmp / "other-state")]
    with process(argv, log) as proc:
        wait_until("the warning", lambda: "reachable from other hosts" in log.read_text(), proc, log, 60)
        assert listening(port)
    assert f"WARNING: doctor serve listens on 0.0.0.0:{port}, reachable from other hosts" in log.read_text()
    assert "reachable from other hosts" not in daemon.log.read_text()
