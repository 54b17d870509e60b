"""What the daemon tells people ([notify], doctor.notify): new findings, actions awaiting approval, applied,
verified, rolled back, escalated; one message per change, never repeated cycle after cycle.

`CycleNotices` turns consecutive cycle reports into `NotifyEvent`s (pure); `attach` hangs a `Notifier` on the
daemon's event hub so each cycle's report is sent from the daemon's loop without blocking it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from doctor.notify import Notifier, NotifyEvent

log = logging.getLogger("doctor.serve")

STATUS_EVENT = {"pending": "approval", "applied": "applied", "verified": "verified", "rolled_back": "rolled_back"}
KEEP = 2000  # ids remembered (findings and action statuses) so a long-lived daemon's memory stays bounded


class CycleNotices:
    """The events a person should get from one cycle's report, given what earlier reports already said."""

    def __init__(self) -> None:
        self._said: dict[str, None] = {}  # finding ids and action id:status already notified (insertion order)

    def _new(self, key: str) -> bool:
        if key in self._said:
            return False
        self._said[key] = None
        while len(self._said) > KEEP:
            self._said.pop(next(iter(self._said)))
        return True

    def events(self, report: Mapping[str, Any]) -> list[NotifyEvent]:
        out: list[NotifyEvent] = []
        for f in report.get("findings", []):
            if f.get("severity") in ("warning", "critical") and self._new(f"finding:{f['id']}"):
                out.append(NotifyEvent("finding", f.get("engine", "?"), f.get("playbook", "?"), f.get("summary", ""),
                                       f.get("severity", "warning")))
        playbook_of = {f["id"]: f.get("playbook", "?") for f in report.get("findings", [])}
        for a in report.get("actions", []):
            status, reason = a.get("status"), a.get("reason") or ""
            kind = "escalated" if status == "failed" or "paged" in reason else STATUS_EVENT.get(status or "")
            if kind is None or not self._new(f"action:{a['id']}:{kind}"):
                continue
            summary = f"{a['action']} on {a['target']}: {status}" + (f" ({reason})" if reason else "")
            out.append(NotifyEvent(kind, a.get("engine") or a["target"], playbook_of.get(a.get("finding"), "-"),  # type: ignore[arg-type]
                                   summary, "critical" if kind in ("escalated", "rolled_back") else "warning",
                                   action_id=a["id"]))
        return out


def attach(listen: Callable[[Callable[[str, dict[str, Any]], None]], None], latest: Callable[[], Any],
           notifier: Notifier) -> set[asyncio.Task[bool]]:
    """On each `cycle` event, send what its report (`latest()`, a CycleResult) says that is new; returns the set
    of sends in flight (the caller keeps it, so none is collected mid-send)."""
    notices = CycleNotices()
    tasks: set[asyncio.Task[bool]] = set()

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind != "cycle" or latest() is None:
            return
        for event in notices.events(latest().report):
            task = asyncio.get_running_loop().create_task(notifier.send(event))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    listen(on_event)
    return tasks
