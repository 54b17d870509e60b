"""The elector's margin logic on a virtual clock: a replica acts only until the start of its last answered request
+ lease - margin, whatever the store's answers take or whether they come; two replicas over one store (the store's
lease counted from when it received a request, as etcd does) never act at the same instant."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from doctor.config import ConfigError, config_from_dict
from doctor.leader.elector import Elector
from doctor.leader.store import Grant, Holder, LeaseError, LeaseLost


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Store:
    """A lease store in virtual time (the I/O the elector talks to): each request reaches it `delay_s` after it is
    sent and is answered `delay_s` later; a replica in `cut` reaches nothing (its request times out after
    `timeout_s`). The lease runs from when the store *received* the request."""

    clock: Clock
    delay_s: float = 0.0
    timeout_s: float = 0.5
    cut: set[str] = field(default_factory=set)
    holder_id: str | None = None
    expires: float = float("-inf")
    revision: int = 0
    name: str = "virtual"

    async def _arrive(self, who: str) -> None:
        if who in self.cut:
            self.clock.now += self.timeout_s
            raise LeaseError("timed out")
        self.clock.now += self.delay_s

    def _answer(self) -> None:
        self.clock.now += self.delay_s

    async def try_acquire(self, holder: str, lease_s: float) -> Grant | None:
        await self._arrive(holder)
        if self.holder_id is not None and self.clock.now >= self.expires:
            self.holder_id = None  # expired in the store
        if self.holder_id is not None:
            self._answer()
            return None
        self.revision += 1
        self.holder_id, self.expires = holder, self.clock.now + lease_s
        self._answer()
        return Grant(holder, self.revision, lease_s)

    async def renew(self, grant: Grant) -> Grant:
        await self._arrive(grant.holder)
        if self.holder_id != grant.holder or self.clock.now >= self.expires:
            self._answer()
            raise LeaseLost("not yours")
        self.expires = self.clock.now + grant.lease_s
        self._answer()
        return grant

    async def release(self, grant: Grant) -> None:
        if self.holder_id == grant.holder:
            self.holder_id = None

    async def holder(self) -> Holder:
        live = self.holder_id is not None and self.clock.now < self.expires
        return Holder(self.holder_id if live else None, self.revision)

    async def aclose(self) -> None:
        pass


def elector(store: Store, name: str, notes: list[tuple[str, str, dict[str, object]]], *, lease_s: float = 10,
            renew_s: float = 3, margin_s: float = 2, retry_s: float = 1) -> Elector:
    return Elector(store, identity=name, lease_s=lease_s, renew_s=renew_s, margin_s=margin_s, retry_s=retry_s,
                   monotonic=store.clock, wall=store.clock,
                   note=lambda event, **f: notes.append((name, event, {**f, "at": store.clock.now})))


def test_acting_ends_at_the_last_answered_requests_start_plus_lease_less_margin() -> None:
    clock = Clock()
    store = Store(clock, delay_s=0.3)
    notes: list[tuple[str, str, dict[str, object]]] = []
    a = elector(store, "a", notes)

    async def go() -> None:
        t0 = clock.now
        await a.step()  # acquire: sent at t0, answered at t0 + 0.6
        assert a.may_act() is None and a.act_until == pytest.approx(t0 + 10 - 2)
        clock.now = t0 + 3
        t1 = clock.now
        await a.step()  # renewal sent at t1
        assert a.act_until == pytest.approx(t1 + 8)
        store.cut.add("a")  # from now on no answer comes
        clock.now = t1 + 3
        while clock.now < t1 + 8 - 0.6:
            await a.step()
            assert a.may_act() is None  # still inside its own deadline
            clock.now += 0.1
        clock.now = t1 + 8  # exactly the deadline: no more acting, before the loop even notices
        assert a.may_act() is not None and "not renewed in time" in str(a.may_act())
        assert store.expires >= t1 + 10  # the store's lease runs longer than the replica acted: the margin
        await a.step()
        assert [e for _, e, _ in notes] == ["leader_acquired", "leader_lost"]
        assert notes[1][2]["acted_until"] == pytest.approx(t1 + 8)

    asyncio.run(go())


def test_a_renewal_answered_late_counts_from_when_it_was_sent() -> None:
    clock = Clock()
    store = Store(clock, delay_s=0.0)
    a = elector(store, "a", [])

    async def go() -> None:
        await a.step()
        clock.now += 3
        sent = clock.now
        store.delay_s = 2.5  # the answer takes 5 s in all
        await a.step()
        assert clock.now == pytest.approx(sent + 5)
        assert a.act_until == pytest.approx(sent + 8)  # not (answer + 8)

    asyncio.run(go())


def test_a_lease_the_store_says_is_gone_stops_acting_at_once() -> None:
    clock = Clock()
    store = Store(clock)
    notes: list[tuple[str, str, dict[str, object]]] = []
    a = elector(store, "a", notes)

    async def go() -> None:
        await a.step()
        store.holder_id = "someone-else"  # e.g. an operator deleted the key and another replica took it
        clock.now += 3
        await a.step()
        assert a.may_act() is not None
        assert notes[-1][1] == "leader_lost" and "gone" in str(notes[-1][2]["reason"])

    asyncio.run(go())


@pytest.mark.parametrize("delay_s", [0.0, 0.2, 0.45])
def test_two_replicas_one_partitioned_never_act_at_the_same_instant(delay_s: float) -> None:
    clock = Clock()
    store = Store(clock, delay_s=delay_s, timeout_s=0.9)
    notes: list[tuple[str, str, dict[str, object]]] = []
    a, b = elector(store, "a", notes), elector(store, "b", notes)
    acting: dict[str, list[float]] = {"a": [], "b": []}

    async def go() -> None:
        next_at = {"a": clock.now, "b": clock.now + 0.5}
        end = clock.now + 120
        while clock.now < end:
            for name, e in (("a", a), ("b", b)):
                if clock.now >= next_at[name]:
                    wait = await e.step()
                    next_at[name] = clock.now + max(wait, 0.01)
            if clock.now >= 1000 + 20 and clock.now < 1000 + 60:
                store.cut = {"a"}  # 40 s partition of the first leader
            elif clock.now >= 1000 + 60 and clock.now < 1000 + 80:
                store.cut = {"b"}  # then of the second
            else:
                store.cut = set()
            assert not (a.leading and b.leading), f"both act at {clock.now}"
            for name, e in (("a", a), ("b", b)):
                if e.leading:
                    acting[name].append(clock.now)
            clock.now += 0.05

    asyncio.run(go())
    assert acting["a"] and acting["b"]  # both led at some point: the lease changed hands
    events = [(n, e) for n, e, _ in notes]
    assert ("a", "leader_lost") in events and ("b", "leader_acquired") in events and ("b", "leader_lost") in events
    # each loss's last acting instant comes before the next holder's acquisition
    for i, (n, e, f) in enumerate(notes):
        if e == "leader_acquired":
            earlier = [g for m, ev, g in notes[:i] if ev == "leader_lost" and m != n]
            assert all(float(g["acted_until"]) <= float(f["at"]) for g in earlier)  # type: ignore[arg-type]


def test_inconsistent_timing_is_refused_naming_the_key(tmp_path: Path) -> None:
    base = {"engines": [{"name": "hot", "url": "http://127.0.0.1:1"}]}
    with pytest.raises(ConfigError, match="renew_s"):
        config_from_dict({**base, "serve": {"leader": {"lease_s": 10, "margin_s": 2, "renew_s": 9}}})
    with pytest.raises(ConfigError, match="margin_s"):
        config_from_dict({**base, "serve": {"leader": {"lease_s": 10, "margin_s": 10}}})
    with pytest.raises(ConfigError, match="store"):
        config_from_dict({**base, "serve": {"leader": {"store": "zookeeper"}}})
    with pytest.raises(ConfigError, match="endpoints"):
        config_from_dict({**base, "serve": {"leader": {"endpoints": ["127.0.0.1:2379"]}}})
    s = config_from_dict({**base, "serve": {"leader": {"lease_s": "15s", "endpoints": ["http://10.0.0.5:2379"]}}})
    lead = s.serve.leader
    assert lead is not None and (lead.store, lead.lease_s, lead.renew_s, lead.margin_s) == ("etcd", 15, 5, 3)
    assert config_from_dict(base).serve.leader is None  # absent: the daemon acts alone


def test_the_loop_outlives_a_store_that_answers_nonsense() -> None:
    clock = Clock()
    store = Store(clock)
    a = elector(store, "a", [])
    answers = iter([ValueError("not JSON"), None, None])
    real = store.try_acquire

    async def flaky(holder: str, lease_s: float) -> Grant | None:
        failure = next(answers)
        if failure is not None:
            raise failure
        return await real(holder, lease_s)

    store.try_acquire = flaky  # type: ignore[method-assign]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        clock.now += s
        if len(slept) >= 2:
            raise asyncio.CancelledError

    a.sleep = sleep

    async def go() -> None:
        with pytest.raises(asyncio.CancelledError):
            await a.run()

    asyncio.run(go())
    assert a.leading and slept[0] == 1  # the failed step waited retry_s, the next acquired


def test_a_stop_that_lands_as_the_store_answers_stops_the_election() -> None:
    """The election's task cancelled (the daemon's stop) in the loop iteration the store's answer comes ends it:
    Python 3.11's wait_for returned the grant and dropped that cancel, and the elector went on renewing after the
    daemon had begun to shut down (which then waited on it)."""
    running: list[asyncio.Task[None]] = []

    class AnswersAsTheStopLands(Store):
        async def try_acquire(self, holder: str, lease_s: float) -> Grant | None:
            grant = await super().try_acquire(holder, lease_s)
            asyncio.get_running_loop().call_soon(running[0].cancel)  # runs before the elector sees the grant
            return grant

    store = AnswersAsTheStopLands(Clock())
    a = Elector(store, identity="a", lease_s=10, renew_s=3, margin_s=2, retry_s=1, monotonic=store.clock,
                wall=store.clock, sleep=lambda s: asyncio.sleep(0.01))

    async def go() -> None:
        task = asyncio.create_task(a.run())
        running.append(task)
        done, _ = await asyncio.wait({task}, timeout=5)
        assert task in done and task.cancelled(), "the election went on after its task was cancelled"

    asyncio.run(go())
