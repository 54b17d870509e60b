"""The audit log: append-only JSON lines with every field, and secrets never written."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from doctor.remedy.audit import REDACTED, AuditLog, Redactor, secret_key
from doctor.remedy.model import ActionRecord

CTX = multiprocessing.get_context("fork")
TOKEN = "s3cr3t-router-token-9f8e7d"


def record(**kw: Any) -> ActionRecord:
    return ActionRecord(action={"id": "act-1", "action": "length_limit", "target": "router",
                                "params": {"max_tokens": 8192, "expires_in_s": 3600}, "inverse": {"max_tokens": None},
                                "risk": "medium", "description": ""},
                        engine="hot", playbook="p99_spike", finding_id="fnd-abc", trigger="webhook:VLLMP99High", **kw)


def test_line_has_who_what_why_and_outcome(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", clock=lambda: 1_700_000_000.0)
    rec = record(before={"p99_ttft_s": 2.1}, after={"p99_ttft_s": 0.89}, status="verified")
    line = log.write("verified", rec, detail="p99 TTFT 2.1 -> 0.89 s")
    (got,) = list(log.events())
    assert got == line
    assert got["event"] == "verified" and got["id"] == rec.id and got["trigger"] == "webhook:VLLMP99High"
    assert got["finding"] == "fnd-abc" and got["playbook"] == "p99_spike" and got["engine"] == "hot"
    assert got["action"] == "length_limit" and got["target"] == "router"
    assert got["params"] == {"max_tokens": 8192, "expires_in_s": 3600}  # max_tokens is not a secret
    assert got["before"] == {"p99_ttft_s": 2.1} and got["after"] == {"p99_ttft_s": 0.89}
    assert got["status"] == "verified" and got["at"] == 1_700_000_000.0 and got["time"].startswith("2023-11-14T")
    assert got["detail"] == "p99 TTFT 2.1 -> 0.89 s" and got["pid"] == os.getpid()


def test_append_only_one_line_per_event(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "audit.jsonl"
    log = AuditLog(path)
    rec = record()
    for event in ("planned", "applied", "verified"):
        log.write(event, rec)
    first = path.read_text()
    AuditLog(path).write("planned", record())
    assert path.read_text().startswith(first)
    assert [e["event"] for e in log.events()] == ["planned", "applied", "verified", "planned"]
    assert [e["event"] for e in log.events(rec.id)] == ["planned", "applied", "verified"]


def test_configured_secret_never_written(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, secrets=[TOKEN, None, ""])
    rec = record(reason=f"router answered 401 for {TOKEN}")
    rec.steps.append(f"PUT /router/policy with {TOKEN}")
    line = log.write("failed", rec, context={"header": TOKEN, "nested": [TOKEN, {"x": f"a{TOKEN}b"}]},
                     router_token=TOKEN, echoed=TOKEN)
    raw = path.read_text()
    assert TOKEN not in raw
    assert line["echoed"] == REDACTED and line["router_token"] == REDACTED
    assert line["context"]["nested"][0] == REDACTED and line["context"]["nested"][1]["x"] == f"a{REDACTED}b"
    assert line["reason"] == f"router answered 401 for {REDACTED}"
    log2 = AuditLog(path)
    log2.add_secret(TOKEN)
    log2.write("step", record(), note=f"token {TOKEN}")
    assert TOKEN not in path.read_text()


@pytest.mark.parametrize("key", ["token", "router_token", "Authorization", "authorization", "password", "apiKey",
                                 "api_key", "X-API-Key", "client_secret", "secret", "bearer", "Cookie",
                                 "ROUTER_POLICY_TOKEN", "db_password"])
def test_secret_keys(key: str) -> None:
    assert secret_key(key)
    assert Redactor()({key: "abc", "keep": 1}) == {key: REDACTED, "keep": 1}


@pytest.mark.parametrize("key", ["max_tokens", "threshold_tokens", "prompt_tokens", "length_limit_tokens",
                                 "author", "trigger", "engine", "tokens_per_s"])
def test_not_secret_keys(key: str) -> None:
    assert not secret_key(key)


@pytest.mark.parametrize(("text", "expected"), [
    ("Bearer abc.def-123", REDACTED),
    ("Authorization: Bearer abc123", f"Authorization: {REDACTED}"),
    ("GET /x?token=abc123&n=1", f"GET /x?token={REDACTED}&n=1"),
    ("access_token=zzz", f"access_token={REDACTED}"),
    ("password: hunter2", f"password: {REDACTED}"),
    ('{"api_key": "k-123"}', f'{{"api_key": "{REDACTED}"}}'),
    ("http://admin:pa55@router:9000/policy", f"http://{REDACTED}@router:9000/policy"),
    ("router refused the token (401)", "router refused the token (401)"),
    ("max_tokens: 8192", "max_tokens: 8192"),
])
def test_secret_values_in_text(text: str, expected: str) -> None:
    assert Redactor().text(text) == expected


def test_none_under_a_secret_key_stays_none() -> None:
    assert Redactor()({"token": None, "password": ""}) == {"token": None, "password": ""}


def _writer(path: str, n: int) -> None:
    log = AuditLog(Path(path), secrets=[TOKEN])
    for i in range(n):
        log.write("step", record(), i=i, blob="x" * 3000, token=TOKEN)
    os._exit(0)


def test_concurrent_writers_keep_lines_whole(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    procs = [CTX.Process(target=_writer, args=(str(path), 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    raw = path.read_text().splitlines()
    assert len(raw) == 100 and all(json.loads(x)["token"] == REDACTED for x in raw)
    assert TOKEN not in path.read_text()
