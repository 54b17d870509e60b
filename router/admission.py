"""Admission in the router's event loop: the sans-IO core (router.release) with asyncio futures and timers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from router.policy import Policy
from router.release import AdmissionCore, AdmissionIo, NoUpstream, QueueFull
from router.upstreams import Upstream

__all__ = ["Admission", "NoUpstream", "QueueFull", "Upstream"]

Ticket = asyncio.Future[Upstream]


def _now() -> float:
    return asyncio.get_running_loop().time()


def _call_at(when: float, fn: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_at(when, fn)


def _grant(fut: Ticket, u: Upstream) -> None:
    fut.set_result(u)


def _fail(fut: Ticket, exc: Exception) -> None:
    fut.set_exception(exc)


def _settled(fut: Ticket) -> bool:
    return fut.done()


_IO: AdmissionIo[Ticket] = AdmissionIo(_now, _call_at, _grant, _fail, _settled)


class Admission(AdmissionCore[Ticket]):
    """Queues per role; `pools` gives each role's current upstream list (the router keeps it in sync)."""

    def __init__(self, pools: Mapping[str, list[Upstream]], policy: Callable[[], Policy],
                 fits: Callable[[str, int], bool] | None = None,
                 on_release: Callable[[str, float], None] | None = None) -> None:
        super().__init__(pools, policy, _IO, fits, on_release)

    async def acquire(self, role: str, tokens: int, seq: int | None = None) -> Upstream:
        """An upstream slot in `role` (the caller must release it), after waiting in the queue if needed."""
        seq = self.next_seq() if seq is None else seq
        u = self.take_now(role, seq)
        if u is not None:
            return u
        fut: Ticket = asyncio.get_running_loop().create_future()
        w = self.enqueue(role, tokens, fut, seq)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(fut.result(), 0.0)
            else:
                self.remove(w)
            raise
