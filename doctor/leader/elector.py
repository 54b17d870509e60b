"""The elector: hold the lease while this replica may act, and say at every moment whether it may.

The rule that keeps two replicas from acting at once: a replica acts only until `t0 + lease_s - margin_s` on its
own monotonic clock, where `t0` is the moment just *before* it sent the request (grant or renewal) the store
answered last. The store counts the lease from when it received that request, later than `t0`, so this replica
stops acting `margin_s` before the lease can have expired in the store, and before any other replica can have
been granted it, however long the answer took or whether it came at all. `margin_s` covers the clocks' rates
drifting apart and a pause between the check (`may_act`) and the act. Renewals go every `renew_s`, well before
the deadline; one that cannot be made is retried every `retry_s` until the deadline passes, then the replica
is standby and tries to acquire again like the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from doctor.leader.store import Grant, Holder, LeaseError, LeaseLost, LeaseStore

log = logging.getLogger("doctor.leader")
Note = Callable[..., Any]


class Elector:
    """One replica's side of the election over `store`; `note(event, **fields)` is the audit log's."""

    def __init__(self, store: LeaseStore, *, identity: str, lease_s: float, renew_s: float, margin_s: float,
                 retry_s: float, note: Note | None = None, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 on_change: Callable[[bool], None] | None = None) -> None:
        if not 0 < margin_s < lease_s or not 0 < renew_s < lease_s - margin_s:
            raise ValueError(f"need 0 < margin_s ({margin_s:g}) < lease_s ({lease_s:g}) and 0 < renew_s "
                             f"({renew_s:g}) < lease_s - margin_s")
        self.store = store
        self.identity = identity
        self.lease_s, self.renew_s, self.margin_s, self.retry_s = lease_s, renew_s, margin_s, retry_s
        self.note = note or (lambda event, **fields: None)
        self.monotonic, self.wall, self.sleep = monotonic, wall, sleep
        self.on_change = on_change
        self.grant: Grant | None = None
        self.act_until = float("-inf")  # monotonic
        self.renewed_at = float("-inf")  # monotonic t0 of the last answered request
        self.seen: Holder = Holder(None)
        self.transitions = 0
        self.last_error: str | None = None

    # -- what the daemon asks

    def may_act(self) -> str | None:
        """None while this replica may act; else why not (for the audit and the API's answer)."""
        if self.grant is None:
            who = f"the leader is {self.seen.identity}" if self.seen.identity else "no replica holds the lease"
            return f"standby: {who} ({self.store.name})"
        if self.monotonic() >= self.act_until:
            return (f"the lease was not renewed in time ({self.store.name}: {self.last_error or 'no answer'}): "
                    "standby until it is acquired again")
        return None

    @property
    def leading(self) -> bool:
        return self.may_act() is None

    def state(self) -> dict[str, Any]:
        """For GET /v1/state."""
        left = self.act_until - self.monotonic() if self.grant is not None else None
        return {"role": "leader" if self.leading else "standby", "identity": self.identity, "store": self.store.name,
                "holder": self.grant.holder if self.leading and self.grant else self.seen.identity,
                "fence": self.grant.token if self.grant else self.seen.token, "lease_s": self.lease_s,
                "margin_s": self.margin_s, "acting_for_s": round(max(0.0, left), 3) if left is not None else None,
                "transitions": self.transitions, "last_error": self.last_error}

    # -- the loop

    async def run(self) -> None:
        """Acquire, renew, lose, acquire again, until cancelled; a step that fails unexpectedly is logged and
        retried (acting still ends at the deadline: `may_act` reads the clock, not this loop)."""
        while True:
            try:
                delay = await self.step()
            except Exception as exc:  # a store's answer not understood, a bug: the election must go on
                log.exception("leader: a step of the election failed")
                self._failed(exc)
                delay = self.retry_s
            await self.sleep(delay)

    async def step(self) -> float:
        """One move of the election; returns how long to wait before the next."""
        now = self.monotonic()
        if self.grant is not None and now >= self.act_until:
            self._lose("the lease was not renewed before its deadline less the margin")
        if self.grant is not None:
            due = self.renewed_at + self.renew_s
            if now < due:
                return min(due, self.act_until) - now
            return await self._renew()
        return await self._acquire()

    async def _acquire(self) -> float:
        t0 = self.monotonic()
        try:
            # asyncio.timeout, not wait_for, for every request to the store: Python 3.11's wait_for drops a cancel
            # (the daemon's stop) that lands as the store answers, and the election then went on after the stop
            async with asyncio.timeout(self.lease_s - self.margin_s):
                grant = await self.store.try_acquire(self.identity, self.lease_s)
            if grant is None:
                async with asyncio.timeout(self.retry_s):
                    self.seen = await self.store.holder()
        except (LeaseError, TimeoutError) as exc:
            self._failed(exc)
            return self.retry_s
        self.last_error = None
        if grant is None:
            return self.retry_s
        lease = min(self.lease_s, grant.lease_s)
        if self.monotonic() >= t0 + lease - self.margin_s:  # the answer came too late to act on: let it lapse
            return self.retry_s
        self.grant, self.renewed_at, self.act_until = grant, t0, t0 + lease - self.margin_s
        self.seen = Holder(grant.holder, grant.token)
        self.transitions += 1
        self.note("leader_acquired", holder=self.identity, fence=grant.token, store=self.store.name,
                  lease_s=lease, margin_s=self.margin_s, acting_until=self._wall_of(self.act_until))
        log.info("leader: acquired the lease (%s, token %d); acting", self.store.name, grant.token)
        self._changed(True)
        return max(0.0, min(self.renew_s, self.act_until - self.monotonic()))

    async def _renew(self) -> float:
        assert self.grant is not None
        t0 = self.monotonic()
        try:
            async with asyncio.timeout(max(0.001, self.act_until - t0)):
                grant = await self.store.renew(self.grant)
        except LeaseLost as exc:
            self._lose(f"the store says the lease is gone: {exc}")
            return 0.0
        except (LeaseError, TimeoutError) as exc:
            self._failed(exc)
            return max(0.0, min(self.retry_s, self.act_until - self.monotonic()))
        self.last_error = None
        self.grant, self.renewed_at = grant, t0
        self.act_until = max(self.act_until, t0 + min(self.lease_s, grant.lease_s) - self.margin_s)
        return max(0.0, min(self.renew_s, self.act_until - self.monotonic()))

    async def release(self) -> None:
        """Stop acting, then give the lease up (on shutdown): the other replica takes over at once."""
        grant = self.grant
        if grant is None:
            return
        acted_until = self.wall()
        self.grant, self.act_until = None, float("-inf")
        self._changed(False)
        with contextlib.suppress(LeaseError, TimeoutError):
            async with asyncio.timeout(self.retry_s):
                await self.store.release(grant)
        self.note("leader_released", holder=self.identity, fence=grant.token, store=self.store.name,
                  acted_until=acted_until)

    # -- bookkeeping

    def _lose(self, why: str) -> None:
        assert self.grant is not None
        grant = self.grant
        acted_until = self._wall_of(min(self.act_until, self.monotonic()))
        self.grant, self.act_until = None, float("-inf")
        self.seen = Holder(None)
        self.note("leader_lost", holder=self.identity, fence=grant.token, store=self.store.name, reason=why,
                  acted_until=acted_until, last_error=self.last_error)
        log.warning("leader: lost the lease (%s): %s; standby", self.store.name, why)
        self._changed(False)

    def _failed(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        log.warning("leader: %s: %s", self.store.name, self.last_error)

    def _wall_of(self, mono: float) -> float:
        return self.wall() + (mono - self.monotonic())

    def _changed(self, leading: bool) -> None:
        if self.on_change is not None:
            self.on_change(leading)
