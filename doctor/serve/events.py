"""State changes for `GET /v1/events` (server-sent events): a hub with one bounded queue per subscriber.

A subscriber that does not keep up loses its oldest events (and is told how many with a `dropped` event),
so a stuck client never holds the daemon's memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from doctor.jsonout import dumps

log = logging.getLogger("doctor.serve")
QUEUE_KEEP = 100
MAX_SUBSCRIBERS = 32


class TooManySubscribers(Exception):
    pass


class EventHub:
    """Publish (kind, data) to every subscriber's queue."""

    def __init__(self, *, clock: Callable[[], float] = time.time, keep: int = QUEUE_KEEP) -> None:
        self.clock = clock
        self.keep = max(3, keep)
        self._subscribers: set[asyncio.Queue[tuple[str, dict[str, Any]]]] = set()
        self._listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self._seq = 0

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def listen(self, listener: Callable[[str, dict[str, Any]], None]) -> None:
        """Call `listener(kind, data)` on every event, in the daemon's loop (e.g. a notification sink); it must not
        block, and an exception it raises is logged and ignored."""
        self._listeners.append(listener)

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        self._seq += 1
        item = (kind, {"seq": self._seq, "at": self.clock(), **data})
        for listener in self._listeners:
            try:
                listener(*item)
            except Exception:
                log.exception("event listener %r failed", listener)
        for q in self._subscribers:
            if q.full():  # drop the two oldest: one for the note that events were dropped, one for this event
                q.get_nowait()
                q.get_nowait()
                q.put_nowait(("dropped", {"seq": self._seq, "at": self.clock(),
                                          "note": "events were dropped: re-read GET /v1/state"}))
            q.put_nowait(item)

    async def stream(self, *, heartbeat_s: float = 15.0) -> AsyncIterator[str]:
        """Server-sent events for one subscriber (a comment line every `heartbeat_s` keeps proxies open)."""
        if len(self._subscribers) >= MAX_SUBSCRIBERS:
            raise TooManySubscribers(f"{MAX_SUBSCRIBERS} event streams are open already")
        q: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(self.keep)
        self._subscribers.add(q)
        try:
            yield ": connected\n\n"
            while True:
                try:
                    kind, data = await asyncio.wait_for(q.get(), heartbeat_s)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                yield f"event: {kind}\nid: {data['seq']}\ndata: {dumps(data, default=str)}\n\n"
        finally:
            self._subscribers.discard(q)
