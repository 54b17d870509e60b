"""Admission: one queue per role feeding that role's active upstreams, each with a cap on requests in flight.

Release rule (`batch_timeout_ms`): waiting requests are released in a group when there are at least as
many as free in-flight slots, or when the oldest has waited batch_timeout_ms; 0 releases at once.
Order: shortest prompt first, except that a request passed by `fairness_window` later arrivals goes
next (0 = strict arrival order).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from router.policy import ROLES, Policy


class NoUpstream(Exception):
    """No active, healthy upstream can take the request (HTTP 503)."""


class QueueFull(Exception):
    """The role's queue is at max_queue (HTTP 429); retry_after in whole seconds."""

    def __init__(self, role: str, length: int, max_queue: int, retry_after: int) -> None:
        super().__init__(f"the {role} queue is full ({length} waiting, max_queue {max_queue})")
        self.role = role
        self.length = length
        self.retry_after = retry_after


class Upstream:
    """One engine behind the router, as the router sees it."""

    __slots__ = ("detached", "healthy", "in_flight", "last_error", "max_in_flight", "max_model_len", "name",
                 "role", "state", "url")

    def __init__(self, name: str, url: str, role: str, state: str = "active", max_in_flight: int = 256) -> None:
        self.name = name
        self.url = url
        self.role = role
        self.state = state
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.healthy = False
        self.max_model_len: int | None = None
        self.last_error: str | None = None
        self.detached = False  # removed from the policy; its in-flight requests still finish

    def eligible(self) -> bool:
        return self.state == "active" and self.healthy and not self.detached

    def status(self) -> dict[str, object]:
        return {"url": self.url, "role": self.role, "state": self.state, "healthy": self.healthy,
                "in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
                "max_model_len": self.max_model_len, "last_error": self.last_error}


@dataclass(eq=False)
class Waiter:
    seq: int
    role: str
    tokens: int
    arrived: float
    future: asyncio.Future[Upstream]
    passed: int = 0


def other(role: str) -> str:
    return "cold" if role == "hot" else "hot"


class Admission:
    """Queues per role; `pools` gives each role's current upstream list (the router keeps it in sync)."""

    def __init__(self, pools: dict[str, list[Upstream]], policy: Callable[[], Policy],
                 fits: Callable[[str, int], bool],
                 on_release: Callable[[str, float], None] | None = None) -> None:
        self.pools = pools
        self.policy = policy
        self.fits = fits
        self.on_release = on_release or (lambda role, waited: None)
        self.queues: dict[str, list[Waiter]] = {r: [] for r in ROLES}
        self.timers: dict[str, asyncio.TimerHandle | None] = {r: None for r in ROLES}
        self.service_s: dict[str, float] = {r: 1.0 for r in ROLES}  # EWMA of time held, for Retry-After
        self.dispatch_log: list[tuple[str, int]] = []  # (role, seq) of recent releases, for tests
        self._seq = 0

    # ----- helpers -------------------------------------------------------------------------------

    def eligible(self, role: str) -> list[Upstream]:
        return [u for u in self.pools[role] if u.eligible()]

    def has_eligible(self, role: str) -> bool:
        return any(u.eligible() for u in self.pools[role])

    @staticmethod
    def _best(ups: list[Upstream]) -> Upstream | None:
        best: Upstream | None = None
        room = 0
        for u in ups:
            free = u.max_in_flight - u.in_flight
            if free > room:
                best, room = u, free
        return best

    def queue_length(self, role: str) -> int:
        return len(self.queues[role])

    def retry_after(self, role: str) -> int:
        slots = sum(u.max_in_flight for u in self.eligible(role)) or 1
        return max(1, min(60, math.ceil(self.service_s[role] * (len(self.queues[role]) + 1) / slots)))

    def _log(self, role: str, seq: int) -> None:
        self.dispatch_log.append((role, seq))
        if len(self.dispatch_log) > 4096:
            del self.dispatch_log[:2048]

    # ----- acquire / release ---------------------------------------------------------------------

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    async def acquire(self, role: str, tokens: int, seq: int | None = None) -> Upstream:
        """An upstream slot in `role` (the caller must release it), after waiting in the queue if needed."""
        seq = self.next_seq() if seq is None else seq
        pol = self.policy()
        q = self.queues[role]
        if not q and pol.batch_timeout_ms == 0:
            u = self._best(self.eligible(role))
            if u is not None:
                u.in_flight += 1
                self._log(role, seq)
                self.on_release(role, 0.0)
                return u
        if not self.has_eligible(role):
            raise NoUpstream(f"no active {role} upstream")
        if len(q) >= pol.max_queue:
            raise QueueFull(role, len(q), pol.max_queue, self.retry_after(role))
        loop = asyncio.get_running_loop()
        w = Waiter(seq, role, tokens, loop.time(), loop.create_future())
        q.append(w)
        self.pump(role)
        try:
            return await w.future
        except asyncio.CancelledError:
            fut = w.future
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(fut.result(), 0.0)
            else:
                self._remove(w)
            raise

    def _remove(self, w: Waiter) -> None:
        q = self.queues[w.role]
        if w in q:
            q.remove(w)

    def release(self, u: Upstream, held_s: float) -> None:
        u.in_flight -= 1
        if held_s > 0:
            self.service_s[u.role] = 0.8 * self.service_s[u.role] + 0.2 * held_s
        self.pump(u.role)

    # ----- the release rule ----------------------------------------------------------------------

    def pump(self, role: str) -> None:
        q = self.queues[role]
        if not q:
            return
        q[:] = [w for w in q if not w.future.done()]
        if not q:
            return
        ups = self.eligible(role)
        if not ups:
            self.reroute(role)
            return
        free = sum(max(0, u.max_in_flight - u.in_flight) for u in ups)
        if free <= 0:
            return
        pol = self.policy()
        loop = asyncio.get_running_loop()
        now = loop.time()
        wait_s = pol.batch_timeout_ms / 1000.0
        if wait_s > 0 and len(q) < free:
            due = q[0].arrived + wait_s
            if now < due:
                self._arm(role, due)
                return
        for _ in range(min(len(q), free)):
            w = self._pick(q, pol.fairness_window)
            u = self._best(ups)
            assert u is not None
            u.in_flight += 1
            self._log(role, w.seq)
            self.on_release(role, now - w.arrived)
            w.future.set_result(u)
        if q and wait_s > 0:
            self._arm(role, q[0].arrived + wait_s)

    def _arm(self, role: str, due: float) -> None:
        timer = self.timers[role]
        if timer is not None:
            if timer.when() <= due:
                return
            timer.cancel()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self.timers[role] = None
            self.pump(role)

        self.timers[role] = loop.call_at(due, fire)

    @staticmethod
    def _pick(q: list[Waiter], window: int) -> Waiter:
        if window <= 0 or len(q) == 1:
            return q.pop(0)
        idx = -1
        for i, w in enumerate(q):
            if w.passed >= window:
                idx = i
                break
        if idx < 0:
            idx = min(range(len(q)), key=lambda i: (q[i].tokens, q[i].seq))
        for w in q[:idx]:
            w.passed += 1
        return q.pop(idx)

    def reroute(self, role: str) -> None:
        """`role` has no eligible upstream: move its waiters to the other role when they fit, else fail them."""
        q = self.queues[role]
        if not q or self.has_eligible(role):
            return
        dest = other(role)
        can_move = self.has_eligible(dest)
        moved = False
        for w in list(q):
            if w.future.done():
                continue
            if can_move and self.fits(dest, w.tokens):
                w.role = dest
                self.queues[dest].append(w)
                moved = True
            else:
                w.future.set_exception(NoUpstream(f"no active {role} upstream, and the prompt does not fit "
                                                  f"the {dest} engines"))
        q.clear()
        if moved:
            self.queues[dest].sort(key=lambda w: w.arrived)
            self.pump(dest)

    def pump_all(self) -> None:
        for role in ROLES:
            if self.queues[role] and not self.has_eligible(role):
                self.reroute(role)
        for role in ROLES:
            self.pump(role)

    def fail_all(self, message: str) -> None:
        for role in ROLES:
            for w in self.queues[role]:
                if not w.future.done():
                    w.future.set_exception(NoUpstream(message))
            self.queues[role].clear()
