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
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.jsonfile import open_private, private_dir
from doctor.jsonout import dumps
from doctor.remedy.journal import write_all
from doctor.remedy.model import ActionRecord
from doctor.secrets import REDACTED, Redactor, secret_key

__all__ = ["REDACTED", "AuditLog", "Redactor", "secret_key"]


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
        data = (dumps(clean, sort_keys=True, default=str) + "\n").encode("utf-8")
        private_dir(self.path.parent)
        fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
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
