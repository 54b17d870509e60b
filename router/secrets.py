"""Secrets, in one place: bearer tokens read from a file (whose permissions are checked) or the environment,
compared in constant time, and redacted from everything written out (audit log, reports, logs, the TUI).

It lives in router/ because the router stands alone (it imports nothing of the other rooms) while the doctor and
the TUI may import it (through doctor.secrets): one implementation for every room.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import shlex
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REDACTED = "[redacted]"
MAX_SECRET_BYTES = 64 * 1024


class SecretFileError(ValueError):
    """A token or password file that cannot be used; the message names the file and what is wrong."""


def read_secret_file(path: Path | str, what: str = "secret file") -> str:
    """The secret in `path` (stripped). Refused: unreadable, not a regular file, empty, or readable or writable
    by the group or others (mode & 0o077: `chmod 600` it)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SecretFileError(f"cannot read the {what} {p}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecretFileError(f"the {what} {p} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise SecretFileError(f"the {what} {p} has mode {mode:04o}: the group or others may read or change "
                                  f"it; make it private with `chmod 600 {p}`")
        raw = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_SECRET_BYTES:
        raise SecretFileError(f"the {what} {p} is over {MAX_SECRET_BYTES} bytes; it must hold just the secret")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretFileError(f"the {what} {p} is not UTF-8 text") from None
    if not text:
        raise SecretFileError(f"the {what} {p} is empty; it must hold the secret")
    return text


def write_private(path: Path | str, text: str) -> None:
    """Write `text` to `path` readable by its owner only (mode 0600 whatever the umask): for secret files."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def load_token(file: Path | str | None, env_name: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """A bearer token: the file when one is given (read_secret_file), else the environment variable; None: none."""
    if file:
        return read_secret_file(file, "token file")
    env = os.environ if environ is None else environ
    return (env.get(env_name, "").strip() or None) if env_name else None


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison (hmac.compare_digest) of two secrets."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape"))


def bearer_matches(authorization: str, expected: str) -> bool:
    """Does an Authorization header carry `Bearer <expected>`? (constant-time in the token)"""
    scheme, _, value = authorization.partition(" ")
    return scheme.lower() == "bearer" and same_secret(value.strip(), expected)


# ----- redaction -------------------------------------------------------------------------------------------------

_SECRET_WORDS = frozenset({"token", "secret", "secrets", "password", "passwd", "pwd", "passphrase", "authorization",
                           "auth", "apikey", "credential", "credentials", "cookie", "bearer", "privatekey"})
_SECRET_JOINED = ("api_key", "api-key", "apikey", "access_key", "private_key", "client_secret", "x-api-key")
_BEARER = re.compile(r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_PAIR = re.compile(r"(?i)\b((?:[\w-]+[_-])?(?:token|secret|password|passwd|api[_-]?key|authorization|credentials?)"
                   r"[\"']?\s*[=:]\s*[\"']?)(?!\[redacted\])[^\s&\"',;}]+")
_USERINFO = re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+@")
_FLAG = re.compile(r"(--[A-Za-z0-9][\w-]*)(\s+|=)(?!\[redacted\])(\S+)")
_FLAG_SEGMENTS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"})
_HINTS = ("bearer", "basic", "token", "secret", "passw", "key", "auth", "credential", "@")  # what the patterns need


def secret_flag(name: str) -> bool:
    """Does a flag or variable name a secret? (`--api-key`, `HF_TOKEN`, `--hf-token`: yes;
    `--max-num-batched-tokens`, `--ssl-keyfile`: no.)"""
    return any(part in _FLAG_SEGMENTS for part in re.split(r"[-_]+", name.lower()) if part)


def _flag(m: re.Match[str]) -> str:
    return m.group(1) + m.group(2) + REDACTED if secret_flag(m.group(1)) else m.group(0)


def secret_key(key: str) -> bool:
    """Does this key name a secret? (`router_token`, `Authorization`, `apiKey`: yes; `max_tokens`: no.)"""
    low = key.lower()
    if any(j in low for j in _SECRET_JOINED):
        return True
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key).lower()
    return any(part in _SECRET_WORDS for part in re.split(r"[^a-z0-9]+", spaced) if part)


class Redactor:
    """Replaces secrets in text and JSON-like data: the configured secrets wherever they appear, `Bearer ...`,
    `token=...`/`password: ...` pairs, `--api-key X` flags, URL user:password parts, and the value of any key that
    names a secret."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets: list[str] = []
        for s in secrets:
            self.add(s)

    def add(self, secret: str | None) -> None:
        if secret and secret not in self.secrets:
            self.secrets.append(secret)
            self.secrets.sort(key=len, reverse=True)

    def text(self, value: str) -> str:
        if value in self.secrets:
            return REDACTED
        for s in self.secrets:
            value = value.replace(s, REDACTED)
        low = value.lower()
        if not any(h in low for h in _HINTS):
            return value
        value = _BEARER.sub(REDACTED, value)
        value = _FLAG.sub(_flag, value)
        value = _PAIR.sub(lambda m: m.group(1) + REDACTED, value)
        return _USERINFO.sub(REDACTED + "@", value)

    def __call__(self, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: REDACTED if isinstance(k, str) and secret_key(k) and data[k] not in (None, "")
                    else self(v) for k, v in data.items()}
        if isinstance(data, list | tuple):
            return [self(v) for v in data]
        if isinstance(data, str):
            return self.text(data)
        return data


    def strings(self, data: Any) -> Any:
        """Every string in JSON-like data redacted (keys kept, values judged by their text only): for documents
        whose keys are not secrets' names (reports, the daemon's state). Each distinct string is judged once
        (a fleet's report repeats the same texts per engine)."""
        done: dict[str, str] = {}

        def walk(item: Any) -> Any:
            if isinstance(item, str):
                got = done.get(item)
                if got is None:
                    got = done[item] = self.text(item)
                return got
            if isinstance(item, dict):
                return {k: walk(v) for k, v in item.items()}
            if isinstance(item, list | tuple):
                return [walk(v) for v in item]
            return item
        return walk(data)


REDACT = Redactor()  # the patterns alone, for output that has no configured secrets at hand


def redact_command(command: str) -> str:
    """A command line safe to show: values of --api-key/--*token*/... flags and X_TOKEN=... assignments masked."""
    try:
        words = shlex.split(command)
    except ValueError:
        return "(command not shown)"
    out: list[str] = []
    hide_next = False
    for w in words:
        name, eq, _ = w.partition("=")
        secret = secret_flag(name)
        if hide_next:
            out.append("***")
        elif eq and secret:
            out.append(f"{name}=***")
        else:
            out.append(REDACT.text(w))
        hide_next = w.startswith("--") and not eq and secret
    return shlex.join(out)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message (arguments merged in first)."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor or REDACT

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True
        clean = self.redactor.text(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        return True


def redact_logs(redactor: Redactor | None = None, logger: logging.Logger | None = None) -> RedactingFilter:
    """Install a RedactingFilter on every handler of `logger` (the root logger by default)."""
    flt = RedactingFilter(redactor)
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(flt)
    return flt
