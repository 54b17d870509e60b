"""Escalations not yet delivered: kept in the state directory and retried by every later cycle until Alertmanager
(or the webhook) takes them, so a page is never lost to a receiver that was down.

`escalations.json`: {key: {"escalation": {...}, "record": id, "first_at": s, "attempts": n, "last_error": str}},
written atomically under its lock; a key is the record id and the action's status, so the same page is kept once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from doctor.remedy.escalate import Escalation
from doctor.state import StateDir

OUTBOX_FILE = "escalations.json"


@dataclasses.dataclass(frozen=True)
class Undelivered:
    """One escalation waiting for a receiver."""

    key: str
    escalation: Escalation
    record: str
    first_at: float
    attempts: int
    last_error: str


class Outbox:
    """The undelivered escalations of one state directory, shared by cron runs and the daemon."""

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.state = StateDir(Path(state_dir))
        self.clock = clock

    def keep(self, esc: Escalation, record_id: str, error: str) -> str:
        """Keep an escalation that was not delivered (once per record and status); returns its key."""
        key = f"{record_id}|{esc.action_status or ''}"
        with self.state.lock("escalations", wait=True):
            doc = self._load()
            row = doc.get(key) or {"escalation": dataclasses.asdict(esc), "record": record_id,
                                   "first_at": self.clock(), "attempts": 0}
            row["attempts"] = int(row["attempts"]) + 1
            row["last_error"] = error
            doc[key] = row
            self.state.save_json(OUTBOX_FILE, doc)
        return key

    def pending(self) -> list[Undelivered]:
        """Oldest first."""
        out = []
        for key, row in self._load().items():
            try:
                esc = Escalation(**{k: v for k, v in dict(row["escalation"]).items()
                                    if k in Escalation.__dataclass_fields__})
                out.append(Undelivered(key, esc, str(row["record"]), float(row["first_at"]), int(row["attempts"]),
                                       str(row.get("last_error", ""))))
            except (KeyError, TypeError, ValueError):
                continue  # not ours to judge: left in the file, never delivered half-read
        return sorted(out, key=lambda u: u.first_at)

    def delivered(self, key: str) -> None:
        with self.state.lock("escalations", wait=True):
            doc = self._load()
            if doc.pop(key, None) is not None:
                self.state.save_json(OUTBOX_FILE, doc)

    def _load(self) -> dict[str, Any]:
        doc = self.state.load_json(OUTBOX_FILE, {})
        return doc if isinstance(doc, dict) else {}
