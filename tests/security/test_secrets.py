"""One helper for secrets (router.secrets, through doctor.secrets): every place a token is loaded refuses a file the
group or others may read, naming the file and its mode; tokens are compared in constant time; one redaction serves
the audit log, reports, logs and the TUI."""

from __future__ import annotations

import argparse
import io
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.requests import Request

import router.secrets as secrets
from doctor.config import RouterSettings
from doctor.config_notify import NotifySettings
from doctor.config_serve import ServeSettings
from doctor.notify import Notifier
from doctor.serve.auth import Credentials, check, load_credentials
from doctor.serve.client import DaemonClient, DaemonError
from router.app import Router, read_token
from router.config import RouterConfig
from router.secrets import (
    REDACT,
    Redactor,
    SecretFileError,
    read_secret_file,
    redact_command,
    redact_logs,
    write_private,
)
from tui.cli import UsageError, build_parser, source_of

TOKEN = "s3cret-t0ken-value"


def _file(tmp: Path, mode: int, text: str = TOKEN + "\n") -> Path:
    path = tmp / f"token-{mode:o}"
    write_private(path, text)
    path.chmod(mode)
    return path


def test_a_private_file_is_read_and_stripped(tmp_path: Path) -> None:
    assert read_secret_file(_file(tmp_path, 0o600)) == TOKEN
    assert read_secret_file(_file(tmp_path, 0o400)) == TOKEN


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o620])
def test_a_file_the_group_or_others_may_read_or_change_is_refused_naming_it_and_its_mode(tmp_path: Path,
                                                                                         mode: int) -> None:
    path = _file(tmp_path, mode)
    with pytest.raises(SecretFileError) as exc:
        read_secret_file(path)
    assert f"{path} has mode {mode:04o}" in str(exc.value) and f"chmod 600 {path}" in str(exc.value)


def test_missing_empty_and_odd_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    for path, needle in ((tmp_path / "missing", "cannot read"), (_file(tmp_path, 0o600, " \n"), "is empty"),
                         (tmp_path, "not a regular file")):
        with pytest.raises(SecretFileError, match=needle) as exc:
            read_secret_file(path)
        assert str(path) in str(exc.value)


def _notify(p: Path) -> str | None:
    n = Notifier.from_settings(NotifySettings(url="http://127.0.0.1:9/hook", token_file=p))
    if n is None:
        raise SecretFileError("notifications off")  # the log line says why (asserted below)
    return n._headers.get("Authorization")


def _tui(p: Path) -> str | None:
    ns = build_parser().parse_args(["--daemon", "http://127.0.0.1:9", "--token-file", str(p), "--once"])
    try:
        source = source_of(ns, 1.0)
    except UsageError as exc:
        raise SecretFileError(str(exc)) from None
    return str(getattr(source, "_token", None))


def _client(p: Path) -> str | None:
    try:
        return DaemonClient("http://127.0.0.1:9", token_file=p).token
    except DaemonError as exc:
        raise SecretFileError(str(exc)) from None


LOADERS: dict[str, Callable[[Path], object]] = {
    "router policy API": lambda p: read_token(RouterConfig(token_file=str(p)), env={}),
    "doctor's [router] token": lambda p: RouterSettings(token_file=p).token({}),
    "doctor serve credentials": lambda p: load_credentials(ServeSettings(token_file=p, alert_token_file=p,
                                                                         read_token_file=p)).write_token,
    "doctor approve --daemon": _client,
    "doctor tui --daemon": _tui,
    "[notify] token_file": _notify,
}


@pytest.mark.parametrize("where", sorted(LOADERS))
def test_every_place_a_token_is_loaded_checks_the_file(tmp_path: Path, where: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    load = LOADERS[where]
    assert TOKEN in str(load(_file(tmp_path, 0o600)))
    loose = _file(tmp_path, 0o644)
    with caplog.at_level(logging.ERROR), pytest.raises(SecretFileError) as exc:
        load(loose)
    said = str(exc.value) + caplog.text
    assert f"{loose} has mode 0644" in said, said


def test_tokens_come_from_the_environment_when_no_file_is_given() -> None:
    assert read_token(RouterConfig(), env={"ROUTER_POLICY_TOKEN": " t0k \n"}) == "t0k"
    assert RouterSettings(token_env="X_TOKEN").token({"X_TOKEN": "t1"}) == "t1"
    assert DaemonClient("http://127.0.0.1:9", environ={"DOCTOR_SERVE_TOKEN": "t2"}).token == "t2"
    assert read_token(RouterConfig(), env={}) is None


def test_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return False  # whatever the bytes: a comparison done any other way would still let the right token in

    monkeypatch.setattr(secrets.hmac, "compare_digest", spy)
    creds = Credentials(write_token="w-tok", alert_token="a-tok", read_token="r-tok")
    for kind, token in (("write", "w-tok"), ("alert", "a-tok"), ("read", "r-tok")):
        assert check(creds, {"authorization": f"Bearer {token}"}, kind) is not None, kind
    router = Router(RouterConfig(policy_file=""), token="p-tok")
    scope = {"type": "http", "method": "GET", "path": "/router/policy", "headers": [(b"authorization",
                                                                                      b"Bearer p-tok")]}
    denied = router._auth(Request(scope))
    assert denied is not None and denied.status_code == 401
    assert {(b"w-tok", b"w-tok"), (b"a-tok", b"a-tok"), (b"r-tok", b"r-tok"), (b"p-tok", b"p-tok")} <= set(calls)


LEAKS = [
    ("Authorization: Bearer abc.DEF-123", "abc.DEF-123"),
    ("curl -H 'authorization: Basic dXNlcjpodW50ZXIy'", "dXNlcjpodW50ZXIy"),
    ("GET http://admin:hunter2@10.0.0.7:8000/metrics", "hunter2"),
    ("vllm serve m --api-key sk-live-123 --port 8000", "sk-live-123"),
    ("vllm serve m --api-key=sk-live-456", "sk-live-456"),
    ("non-default args: {'api_key': 'sk-live-789', 'port': 8000}", "sk-live-789"),
    ("password=pa55word&user=x", "pa55word"),
    ('{"token": "t0ken-in-json"}', "t0ken-in-json"),
    ("HF_TOKEN=hf_abcdef vllm serve", "hf_abcdef"),
    ("vllm serve m --hf-token hf_xyz987", "hf_xyz987"),
]


@pytest.mark.parametrize(("text", "secret"), LEAKS, ids=[s for _, s in LEAKS])
def test_one_redaction_hides_tokens_passwords_headers_userinfo_and_api_keys(text: str, secret: str) -> None:
    clean = REDACT.text(text)
    assert secret not in clean and "[redacted]" in clean, clean


def test_redaction_keeps_what_is_not_secret() -> None:
    for text in ("max_tokens=16 prompt_tokens: 12", "http://10.0.0.7:8000/v1/completions", "kv_cache_usage 0.93",
                 "route_threshold_tokens: 5120 -> 4096", "vllm serve m --max-num-batched-tokens 8192 --ssl-keyfile k",
                 "max_num_batched_tokens=8192"):
        assert REDACT.text(text) == text
    assert Redactor(["c0nfigured"]).text("x c0nfigured y") == "x [redacted] y"
    doc = {"token_count_method": "estimate", "url": "http://u:pw1@h:1", "n": [1, "Bearer zzz"]}
    assert REDACT.strings(doc) == {"token_count_method": "estimate", "url": "http://[redacted]@h:1",
                                   "n": [1, "[redacted]"]}
    assert REDACT({"Authorization": "x", "max_tokens": 4}) == {"Authorization": "[redacted]", "max_tokens": 4}
    assert redact_command("X_TOKEN=1 vllm serve m --api-key k --port 8000 --max-num-batched-tokens 64") == \
        "'X_TOKEN=***' vllm serve m --api-key '***' --port 8000 --max-num-batched-tokens 64"


def test_the_doctor_writes_through_the_one_helper() -> None:
    from doctor.remedy import audit, engine_procs

    assert audit.Redactor is Redactor and engine_procs.redact is redact_command
    assert isinstance(audit.AuditLog(Path("/nonexistent/audit.jsonl")).redact, Redactor)


def test_logs_are_redacted_by_the_filter() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("test.security.redact")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        redact_logs(Redactor(["c0nfigured-secret"]), logger)
        logger.warning("engine %s answered; token %s", "http://u:pw9@h:1", "c0nfigured-secret")
    finally:
        logger.removeHandler(handler)
    assert "pw9" not in stream.getvalue() and "c0nfigured-secret" not in stream.getvalue()
    assert "answered" in stream.getvalue()


def test_secret_files_are_written_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_private(tmp_path / "t", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t").stat().st_mode) == 0o600


def test_the_daemon_client_flags_are_shared(tmp_path: Path) -> None:
    """`doctor tui` and `doctor approve` take --token-file and --ca-file from one place (doctor.secrets)."""
    from doctor.actions_cli import _parser

    for parser in (build_parser(), _parser("approve")):
        opts = {a.dest for a in parser._actions if isinstance(a, argparse.Action)}
        assert {"token_file", "ca_file"} <= opts


def test_strings_redacts_every_repeat_of_a_string() -> None:
    from router.secrets import REDACTED, Redactor

    leak = "http://u:pw@h:1/metrics: 500"
    out = Redactor().strings({"a": [leak, {"b": leak}], "c": (leak, 3, None), "d": "plain"})
    assert out == {"a": [f"http://{REDACTED}@h:1/metrics: 500", {"b": f"http://{REDACTED}@h:1/metrics: 500"}],
                   "c": [f"http://{REDACTED}@h:1/metrics: 500", 3, None], "d": "plain"}
