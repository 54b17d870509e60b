"""Who may call what: bearer tokens (or Alertmanager's basic auth) read from files when the daemon starts.

- alerts (`POST /v1/alerts`): `Authorization: Bearer <alert token>` (the write token when no alert token is set)
  or basic auth with the configured user and password; with no credential configured at all they are refused
  (403: an alert starts the doctor's cycle, and every call that changes state is authenticated);
- writes (approve, reject, rollback): the write token (`[serve] token_file`); without one they are refused;
- reads: the read token or the write token when `read_token_file` is set, else anyone who can reach the address.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from doctor.config_serve import ServeSettings
from doctor.secrets import SecretFileError, read_secret_file, same_secret

CredentialError = SecretFileError  # a token or password file that cannot be used (the message names it)


@dataclass(frozen=True)
class Credentials:
    write_token: str | None = field(default=None, repr=False)
    alert_token: str | None = field(default=None, repr=False)
    read_token: str | None = field(default=None, repr=False)
    basic_user: str | None = None
    basic_password: str | None = field(default=None, repr=False)

    def secrets(self) -> list[str]:
        return [s for s in (self.write_token, self.alert_token, self.read_token, self.basic_password) if s]


@dataclass(frozen=True)
class Denied:
    status: int  # 401 (who are you) or 403 (not allowed at all)
    reason: str


def load_credentials(settings: ServeSettings) -> Credentials:
    return Credentials(_read(settings.token_file), _read(settings.alert_token_file), _read(settings.read_token_file),
                       settings.basic_auth_user, _read(settings.basic_auth_password_file, "password file"))


def _read(path: Path | None, what: str = "token file") -> str | None:
    return None if path is None else read_secret_file(path, what)


def check(creds: Credentials, headers: Mapping[str, str], kind: str) -> Denied | None:
    """None when the request may go on (kind: alert | write | read)."""
    given = headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    bearer = value.strip() if scheme.lower() == "bearer" else None
    if kind == "alert":
        token = creds.alert_token or creds.write_token
        if token is None and creds.basic_user is None:
            return Denied(403, "alerts are off: set [serve] token_file or alert_token_file (the bearer token "
                               "Alertmanager sends), or basic_auth_user and basic_auth_password_file")
        if bearer is not None and token is not None and _same(bearer, token):
            return None
        if scheme.lower() == "basic" and creds.basic_user is not None and _basic_ok(creds, value.strip()):
            return None
        return Denied(401, "alerts need the bearer token (or basic auth) configured in [serve]")
    if kind == "write":
        if creds.write_token is None:
            return Denied(403, "state-changing calls are off: set [serve] token_file")
        if bearer is not None and _same(bearer, creds.write_token):
            return None
        return Denied(401, "this call changes state: it needs the bearer token of [serve] token_file")
    if creds.read_token is None:
        return None
    if bearer is not None and any(_same(bearer, t) for t in (creds.read_token, creds.write_token) if t):
        return None
    return Denied(401, "reads need the bearer token of [serve] read_token_file (or the write token)")


_same = same_secret  # constant time


def _basic_ok(creds: Credentials, value: str) -> bool:
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return bool(sep) and _same(user, creds.basic_user or "") and _same(password, creds.basic_password or "")
