"""Admission, sans-IO: one queue per role feeding that role's eligible upstreams, each with a cap on requests in flight.

Release rule (`batch_timeout_ms`): waiting requests are released in a group when there are at least as
many as free in-flight slots, or when the oldest has waited batch_timeout_ms; 0 releases at once.
Order: shortest prompt first, except that a request passed by `fairness_window` later arrivals goes
next (0 = strict arrival order). A role with no eligible upstream hands its waiters to the other role where
the prompt fits, else fails them.

The caller supplies the I/O: the clock, a timer, and what granting or failing a waiting request means (an
asyncio future in the router, a simulated dispatch in the efficacy harness's virtual router).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from router.policy import ROLES, Policy
from router.upstreams import Upstream, fits, other, pick

T = TypeVar("T")
DISPATCH_LOG_KEEP = 4096


class AdmissionError(Exception):
    """A request the router cannot admit."""


class NoUpstream(AdmissionError):
    """No active, healthy upstream can take the request (HTTP 503)."""


class QueueFull(AdmissionError):
    """The role's queue is at max_queue (HTTP 429); retry_after in whole seconds."""

    def __init__(self, role: str, length: int, max_queue: int, retry_after: int) -> None:
        super().__init__(f"the {role} queue is full ({length} waiting, max_queue {max_queue})")
        self.role = role
        self.length = length
        self.retry_after = retry_after


@dataclass(eq=False)
class Waiter(Generic[T]):
    seq: int
    role: str
    tokens: int
    arrived: float
    ticket: T
    passed: int = 0


@dataclass(frozen=True)
class AdmissionIo(Generic[T]):
    """What admission needs from the world: time, a timer, and granting, failing or asking after a ticket."""

    now: Callable[[], float]
    call_at: Callable[[float, Callable[[], None]], object]
    grant: Callable[[T, Upstream], None]
    fail: Callable[[T, Exception], None]
    settled: Callable[[T], bool] = lambda ticket: False


class AdmissionCore(Generic[T]):
    """Queues per role; `pools` gives each role's current upstream list (the owner keeps it in sync)."""

    def __init__(self, pools: Mapping[str, list[Upstream]], policy: Callable[[], Policy], io: AdmissionIo[T],
                 fits: Callable[[str, int], bool] | None = None,
                 on_release: Callable[[str, float], None] | None = None) -> None:
        self.pools = pools
        self.policy = policy
        self.io = io
        self.fits = fits or (lambda role, tokens: _fits_pool(self.pools, role, tokens))
        self.on_release = on_release or (lambda role, waited: None)
        self.queues: dict[str, list[Waiter[T]]] = {r: [] for r in ROLES}
        self._due: dict[str, float | None] = {r: None for r in ROLES}
        self.service_s: dict[str, float] = {r: 1.0 for r in ROLES}  # EWMA of time held, for Retry-After
        self.dispatch_log: list[tuple[str, int]] = []  # (role, seq) of recent releases, for tests
        self._seq = 0

    # ----- the pools -----------------------------------------------------------------------------

    def eligible(self, role: str) -> list[Upstream]:
        return [u for u in self.pools[role] if u.eligible()]

    def has_eligible(self, role: str) -> bool:
        return any(u.eligible() for u in self.pools[role])

    def role_for(self, routed: str, tokens: int) -> str | None:
        """The role that takes a prompt routed to `routed`: it, else the other where the prompt fits, else None."""
        if self.has_eligible(routed):
            return routed
        alt = other(routed)
        if self.has_eligible(alt) and self.fits(alt, tokens):
            return alt
        return None

    def queue_length(self, role: str) -> int:
        return len(self.queues[role])

    def retry_after(self, role: str) -> int:
        slots = sum(u.max_in_flight for u in self.eligible(role)) or 1
        return max(1, min(60, math.ceil(self.service_s[role] * (len(self.queues[role]) + 1) / slots)))

    @property
    def seq(self) -> int:
        """The sequence number of the latest arrival to take one."""
        return self._seq

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _log(self, role: str, seq: int) -> None:
        self.dispatch_log.append((role, seq))
        if len(self.dispatch_log) > DISPATCH_LOG_KEEP:
            del self.dispatch_log[:DISPATCH_LOG_KEEP // 2]

    # ----- admit / release -----------------------------------------------------------------------

    def take_now(self, role: str, seq: int, *, announce: bool = True) -> Upstream | None:
        """A slot at once when nothing waits and no batch timeout holds requests back (the caller releases it).
        announce=False leaves the release's record (`announce`) to the caller, once the request is on its way."""
        if self.queues[role] or self.policy().batch_timeout_ms != 0:
            return None
        u = pick(self.eligible(role))
        if u is not None:
            u.in_flight += 1
            if announce:
                self.announce(role, seq)
        return u

    def take_next(self, role: str, *, announce: bool = True) -> Upstream | None:
        """take_now for the next arrival: it takes its sequence number only when it gets a slot."""
        u = self.take_now(role, self._seq + 1, announce=announce)
        if u is not None:
            self._seq += 1
        return u

    def announce(self, role: str, seq: int) -> None:
        """Record a release at once (no wait): the dispatch log and the owner's on_release."""
        self._log(role, seq)
        self.on_release(role, 0.0)

    def enqueue(self, role: str, tokens: int, ticket: T, seq: int) -> Waiter[T]:
        """Queue a request (its ticket is granted or failed later, perhaps at once); NoUpstream, QueueFull."""
        if not self.has_eligible(role):
            raise NoUpstream(f"no active {role} upstream")
        q, pol = self.queues[role], self.policy()
        if len(q) >= pol.max_queue:
            raise QueueFull(role, len(q), pol.max_queue, self.retry_after(role))
        w = Waiter(seq, role, tokens, self.io.now(), ticket)
        q.append(w)
        self.pump(role)
        return w

    def remove(self, w: Waiter[T]) -> None:
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
        q[:] = [w for w in q if not self.io.settled(w.ticket)]
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
        now = self.io.now()
        wait_s = pol.batch_timeout_ms / 1000.0
        if wait_s > 0 and len(q) < free:
            due = q[0].arrived + wait_s
            if now < due:
                self._arm(role, due)
                return
        for _ in range(min(len(q), free)):
            w = _next_waiter(q, pol.fairness_window)
            u = pick(ups)
            assert u is not None
            u.in_flight += 1
            self._log(role, w.seq)
            self.on_release(role, now - w.arrived)
            self.io.grant(w.ticket, u)
        if q and wait_s > 0:
            self._arm(role, max(now, q[0].arrived + wait_s))

    def _arm(self, role: str, due: float) -> None:
        """Pump `role` at `due` unless an earlier pump is already set (a superseded timer does nothing)."""
        current = self._due[role]
        if current is not None and current <= due:
            return
        self._due[role] = due

        def fire() -> None:
            if self._due[role] == due:
                self._due[role] = None
                self.pump(role)

        self.io.call_at(due, fire)

    def reroute(self, role: str) -> None:
        """`role` has no eligible upstream: move its waiters to the other role when they fit, else fail them."""
        q = self.queues[role]
        if not q or self.has_eligible(role):
            return
        dest = other(role)
        can_move = self.has_eligible(dest)
        moved = False
        for w in list(q):
            if self.io.settled(w.ticket):
                continue
            if can_move and self.fits(dest, w.tokens):
                w.role = dest
                self.queues[dest].append(w)
                moved = True
            else:
                self.io.fail(w.ticket, NoUpstream(f"no active {role} upstream, and the prompt does not fit "
                                                  f"the {dest} engines"))
        q.clear()
        if moved:
            self.queues[dest].sort(key=lambda w: (w.arrived, w.seq))
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
                if not self.io.settled(w.ticket):
                    self.io.fail(w.ticket, NoUpstream(message))
            self.queues[role].clear()


def _fits_pool(pools: Mapping[str, list[Upstream]], role: str, tokens: int) -> bool:
    return fits(pools[role], tokens)


def _next_waiter(q: list[Waiter[T]], window: int) -> Waiter[T]:
    """The next waiter: shortest prompt first, except that one passed by `window` later ones goes next."""
    if window <= 0 or len(q) == 1:
        return q.pop(0)
    idx = next((i for i, w in enumerate(q) if w.passed >= window), -1)
    if idx < 0:
        idx = min(range(len(q)), key=lambda i: (q[i].tokens, q[i].seq))
    for w in q[:idx]:
        w.passed += 1
    return q.pop(idx)
