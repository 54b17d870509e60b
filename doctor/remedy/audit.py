"""The append-only audit log: one JSON line per remediation event, with secrets redacted.

Each line: `at` (unix s), `time` (ISO 8601 UTC), `event` (planned, refused, pending, approved, rejected,
applied, step, verified, rolled_back, failed, expired, escalated, ...), `id`, `trigger` (who or what:
cron, serve, webhook:<alert>, person:<name>), `playbook`, `finding`, `engine`, `action`, `target`,
`params`, `inverse`, `verify`, `status`, `reason`, `before` and `after` signals, `steps`, `pid`, and any
extra keyword given to `write()`.

Redaction (applied to the whole line before writing): the value of any key that names a secret (token,
secret, password, authorization, api key, credential, cookie, bearer; but not `max_tokens` and the like)
becomes "[redacted]"; in strings, `Bearer ...`, `token=...`/`password: ...` pairs and URL user:password
parts are replaced by "[redacted]"; any configured secret (the router token) is replaced wherever it
appears, and a string equal to one becomes "[redacted]".
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from doctor.remedy.journal import write_all
from doctor.remedy.model import ActionRecord

REDACTED = "[redacted]"
_SECRET_WORDS = frozenset({"token", "secret", "secrets", "password", "passwd", "pwd", "passphrase", "authorization",
                           "auth", "apikey", "credential", "credentials", "cookie", "bearer", "privatekey"})
_SECRET_JOINED = ("api_key", "apikey", "access_key", "private_key", "client_secret", "x-api-key")
_BEARER = re.compile(r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_PAIR = re.compile(r"(?i)\b((?:[\w-]+[_-])?(?:token|secret|password|passwd|api[_-]?key|authorization|credentials?)"
                   r"\"?\s*[=:]\s*\"?)(?!\[redacted\])[^\s&\"',;]+")
_USERINFO = re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+@")


def secret_key(key: str) -> bool:
    """Does this key name a secret? (`router_token`, `Authorization`, `apiKey`: yes; `max_tokens`: no.)"""
    low = key.lower()
    if any(j in low for j in _SECRET_JOINED):
        return True
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key).lower()
    return any(part in _SECRET_WORDS for part in re.split(r"[^a-z0-9]+", spaced) if part)


class Redactor:
    """Replaces secrets in JSON-like data (dicts, lists, strings)."""

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
        value = _BEARER.sub(REDACTED, value)
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


class AuditLog:
    """Append-only JSON lines at `path`; each write is one fsynced line under an exclusive file lock."""

    def __init__(self, path: Path, *, secrets: Iterable[str | None] = (),
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.redact = Redactor(secrets)
        self.clock = clock

    def add_secret(self, secret: str | None) -> None:
        self.redact.add(secret)

    def write(self, event: str, record: ActionRecord, **extra: Any) -> dict[str, Any]:
        """Append one event about `record`; returns the line as written (redacted)."""
        now = self.clock()
        action = record.action
        line: dict[str, Any] = {
            "at": now, "time": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds"),
            "event": event, "id": record.id, "trigger": record.trigger, "playbook": record.playbook,
            "finding": record.finding_id, "engine": record.engine, "action": action.get("action"),
            "target": action.get("target"), "params": action.get("params", {}), "inverse": record.inverse,
            "verify": record.verify, "status": record.status, "reason": record.reason, "before": record.before,
            "after": record.after, "steps": list(record.steps), "pid": os.getpid(),
        }
        line.update(extra)
        return self._append(line)

    def note(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one event about no action record (the daemon's alerts: received, confirmed, not confirmed,
        resolved, ...): `at`, `time`, `event`, `pid` and `fields`, redacted like every line."""
        now = self.clock()
        line = {"at": now, "time": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds"),
                "event": event, "pid": os.getpid(), **fields}
        return self._append(line)

    def _append(self, line: dict[str, Any]) -> dict[str, Any]:
        clean: dict[str, Any] = self.redact(line)
        data = (json.dumps(clean, sort_keys=True, default=str) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                write_all(fd, data, os.fstat(fd).st_size)
                os.fsync(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return clean

    def events(self, record_id: str | None = None) -> Iterator[dict[str, Any]]:
        """The lines written so far (for one record when given); unreadable lines are skipped."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return
        for raw in text.splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and (record_id is None or entry.get("id") == record_id):
                yield entry
