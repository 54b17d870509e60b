"""A proxied request in flight without a task: answered from the engine connection's callbacks when the engine's
whole answer is in hand, else handed to a task that goes on the usual way.

Proxy.begin writes a plain request to an idle engine connection in the callback that read it from the client. A
non-streamed answer then arrives in one read or a few; relaying it from the last one's callback saves the request
its task (creation, its steps, the future and timer of each wait) and a loop iteration between the engine's answer
and the client's. Anything else (an event stream, an answer held back by back-pressure, an error, a dropped pooled
connection, the read timeout) goes to `later()`, the task path that handles it today, from the state the connection
is in: nothing is written to the client before that hand-over, so the task answers as it would have from the start.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from router.lean_cycle import Cycle
from router.wire import ARRIVING, WHOLE, Sent, WireClient

log = logging.getLogger("router.proxy")


class FlightOwner(Protocol):
    """What a flight reports to (router.proxy.Proxy)."""

    def answer_now(self, flight: Flight) -> None:
        """Relay the engine's whole answer (WireClient.take_whole) to the client, settle the engine connection and
        account for the request."""

    def hung_up(self, flight: Flight) -> None:
        """The client left before its answer: account for it (499)."""

    def later(self, flight: Flight) -> Coroutine[Any, Any, None]:
        """The rest of the request as the task path serves it, from the connection's present state."""


class Flight:
    """One request forwarded at once (`sent`), its answer awaited in callbacks."""

    __slots__ = ("cycle", "owner", "request", "sent", "wire")

    def __init__(self, owner: FlightOwner, wire: WireClient, sent: Sent, cycle: Cycle, request: Any) -> None:
        self.owner = owner
        self.wire = wire
        self.sent = sent
        self.cycle = cycle
        self.request = request  # what the owner needs to answer it (router.proxy._Admitted)

    def start(self) -> None:
        """Listen for the engine's answer and for the client's hang-up."""
        self.wire.listen(self.sent, self._news)
        self.cycle.watch(self._gone)

    def _detach(self) -> None:
        self.wire.unlisten(self.sent)
        self.cycle.watch(None)

    def _news(self) -> None:
        """Something happened on the engine connection: answer now, hand over to a task, or wait on."""
        state = self.wire.news(self.sent)
        if state == ARRIVING:
            return
        self._detach()
        if state == WHOLE:
            try:
                self.owner.answer_now(self)
                return
            except Exception:  # nothing was written (the write comes last): the task path serves it
                log.exception("exception relaying an answer in hand; serving the request the usual way")
        self.cycle.spawn(self.owner.later(self))

    def _gone(self) -> None:
        """The client hung up before its answer: the engine sees the disconnect."""
        self._detach()
        self.wire.abandon(self.sent)
        self.owner.hung_up(self)
