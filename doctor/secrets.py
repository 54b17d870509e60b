"""The doctor's and the TUI's door to router.secrets (token files with their permissions checked, constant-time
comparison, one redaction for every output), and the flags every client of the daemon's API shares."""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Mapping
from pathlib import Path

from router.secrets import (
    REDACT,
    REDACTED,
    RedactingFilter,
    Redactor,
    SecretFileError,
    bearer_matches,
    load_token,
    read_secret_file,
    redact_command,
    redact_logs,
    same_secret,
    secret_key,
    write_private,
)

__all__ = ["DAEMON_TOKEN_ENV", "REDACT", "REDACTED", "RedactingFilter", "Redactor", "SecretFileError",
           "add_daemon_client_args", "bearer_matches", "client_verify", "daemon_token", "load_token",
           "read_secret_file", "redact_command", "redact_logs", "same_secret", "secret_key", "write_private"]

DAEMON_TOKEN_ENV = "DOCTOR_SERVE_TOKEN"


def add_daemon_client_args(p: argparse.ArgumentParser) -> None:
    """--token-file and --ca-file, as every command that calls `doctor serve` takes them."""
    p.add_argument("--token-file", type=Path, help=f"with --daemon: the API's bearer token, a file only its owner "
                   f"may read (default ${DAEMON_TOKEN_ENV})")
    p.add_argument("--ca-file", type=Path, help="with --daemon https://...: the certificate (or CA) to verify the "
                   "daemon's TLS certificate against (default: the system's CAs)")


def daemon_token(token_file: Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The daemon's bearer token: `token_file` when given, else $DOCTOR_SERVE_TOKEN (None: no token)."""
    return load_token(token_file, DAEMON_TOKEN_ENV, environ)


def client_verify(ca_file: Path | None) -> ssl.SSLContext | bool:
    """What httpx's `verify` gets: a context trusting `ca_file`, else True (the system's CAs)."""
    if ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise SecretFileError(f"cannot use the CA file {ca_file}: {exc}") from None
