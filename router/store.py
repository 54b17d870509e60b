"""The current policy, its version and history, persisted to one JSON file (atomic replace)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from router.policy import Policy, PolicyError, diff, parse_policy

log = logging.getLogger("router.policy")
FILE_FORMAT = 1


class PolicyStore:
    """Versioned policy: every change bumps the version, is logged, kept in history and written to disk."""

    def __init__(self, initial: Policy, path: Path | None, *, clock: Callable[[], float],
                 history_keep: int = 200) -> None:
        self.path = path
        self.clock = clock
        self.history_keep = max(1, history_keep)
        self.policy = initial
        self.version = 1
        self.updated_at = clock()
        self.history: list[dict[str, Any]] = [
            {"version": 1, "at": self.updated_at, "source": "start", "changes": ["initial policy"],
             "policy": initial.to_dict()}]
        self.loaded_from_file = False

    def load(self) -> str | None:
        """Restore from the file when it exists; returns a warning when the file is unusable (kept aside)."""
        if self.path is None or not self.path.exists():
            return None
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
                raise PolicyError("not a router policy file (format 1)")
            policy = parse_policy(doc["policy"], now=self.clock())
            version = int(doc["version"])
            history = doc.get("history", [])
            updated = float(doc.get("updated_at", self.clock()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(self.path.name + f".unreadable-{int(self.clock())}")
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = self.path
            msg = f"policy file {self.path} is unusable ({exc}); moved to {aside}; starting from the configuration"
            log.warning(msg)
            return msg
        self.policy, self.version, self.updated_at = policy, version, updated
        self.history = [h for h in history if isinstance(h, dict)][-self.history_keep:]
        self.loaded_from_file = True
        log.info("policy version %d restored from %s", version, self.path)
        return None

    def apply(self, new: Policy, source: str) -> dict[str, Any]:
        """Make `new` current (unless nothing changed); returns the history entry."""
        changes = diff(self.policy, new)
        if not changes:
            return {"version": self.version, "at": self.updated_at, "source": source, "changes": []}
        self.version += 1
        self.updated_at = self.clock()
        self.policy = new
        entry = {"version": self.version, "at": self.updated_at, "source": source, "changes": changes,
                 "policy": new.to_dict()}
        self.history.append(entry)
        del self.history[:-self.history_keep]
        log.info("policy version %d by %s: %s", self.version, source, "; ".join(changes))
        self.save()
        return entry

    def save(self) -> None:
        if self.path is None:
            return
        doc = {"format": FILE_FORMAT, "version": self.version, "updated_at": self.updated_at,
               "policy": self.policy.to_dict(), "history": self.history}
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
