"""The etcd lease store and the elector against a real etcd on loopback (Debian's etcd-server): put-if-absent
with a lease, keep-alive, expiry, release, fencing tokens, and two electors with one partitioned by a proxy."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from doctor.leader.elector import Elector
from doctor.leader.etcd import EtcdLeaseStore
from doctor.leader.store import LeaseError, LeaseLost
from tests.serve.etcd import etcd, etcd_server, proxy_to

pytestmark = pytest.mark.timeout(120)
# Leases long beside the stalls of a loaded 2-core machine (a replica stalled past lease_s - margin_s rightly stops
# acting, which would change who leads in these tests, never make two act).
TIMING = {"lease_s": 6.0, "renew_s": 0.5, "margin_s": 1.5, "retry_s": 0.2}


def test_one_holder_renewals_release_and_growing_tokens(tmp_path: Path) -> None:
    async def go(url: str) -> None:
        a, b = EtcdLeaseStore([url], key="t/leader"), EtcdLeaseStore([url], key="t/leader")
        try:
            ga = await a.try_acquire("a", 5)
            assert ga is not None and ga.holder == "a" and ga.lease_s == 5
            assert await b.try_acquire("b", 5) is None  # held: put-if-absent fails
            assert (await b.holder()).identity == "a"
            assert await a.renew(ga) == ga
            await a.release(ga)
            gb = await b.try_acquire("b", 5)
            assert gb is not None and gb.token > ga.token  # the fencing token grows with each holder
            with pytest.raises(LeaseLost):
                await a.renew(ga)  # revoked: a cannot renew its old lease
            await b.release(gb)
            assert (await a.holder()).identity is None
        finally:
            await a.aclose()
            await b.aclose()

    with etcd(tmp_path) as url:
        asyncio.run(go(url))


def test_an_unrenewed_lease_expires_in_etcd_and_the_other_takes_it(tmp_path: Path) -> None:
    async def go(url: str) -> None:
        a, b = EtcdLeaseStore([url], key="t/leader"), EtcdLeaseStore([url], key="t/leader")
        try:
            ga = await a.try_acquire("a", 2)
            assert ga is not None
            taken_at = time.monotonic()
            gb = None
            while gb is None and time.monotonic() < taken_at + 30:
                gb = await b.try_acquire("b", 2)
                await asyncio.sleep(0.1)
            assert gb is not None and gb.token > ga.token
            assert time.monotonic() - taken_at >= 1.9  # never before the lease's time in etcd
            with pytest.raises(LeaseLost):
                await a.renew(ga)
        finally:
            await a.aclose()
            await b.aclose()

    with etcd(tmp_path) as url:
        asyncio.run(go(url))


def test_unreachable_etcd_is_a_lease_error_naming_it() -> None:
    async def go() -> None:
        store = EtcdLeaseStore(["http://127.0.0.1:9"], timeout_s=0.5)
        try:
            with pytest.raises(LeaseError, match=r"etcd unreachable: http://127\.0\.0\.1:9"):
                await store.try_acquire("a", 5)
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_partitioned_leader_stops_acting_before_the_other_is_granted_the_lease(tmp_path: Path) -> None:
    """Two electors on real time, A reaching etcd through a proxy that is cut: A stops acting by its own deadline,
    B acquires only after etcd expired A's lease, and at no sampled moment do both say they may act."""
    async def go(url: str, proxy_url: str, cut: object, heal: object) -> None:
        notes: list[tuple[str, str, dict[str, object]]] = []

        def elector(name: str, endpoint: str) -> Elector:
            return Elector(EtcdLeaseStore([endpoint], key="t/leader", timeout_s=1.0), identity=name, **TIMING,
                           note=lambda event, **f: notes.append((name, event, {**f, "at": time.time()})))

        a, b = elector("a", proxy_url), elector("b", url)
        ta = asyncio.create_task(a.run())
        try:
            while not a.leading:
                await asyncio.sleep(0.05)
            tb = asyncio.create_task(b.run())
            both = 0
            for _ in range(20):  # 1 s: B standby while A renews
                await asyncio.sleep(0.05)
                assert a.leading and not b.leading
            cut()  # type: ignore[operator]
            deadline = time.monotonic() + 30
            while not b.leading and time.monotonic() < deadline:
                both += a.leading and b.leading
                await asyncio.sleep(0.02)
            assert b.leading and not a.leading and both == 0
            heal()  # type: ignore[operator]
            for _ in range(40):  # 2 s healed: A sees B's lease and stays standby
                await asyncio.sleep(0.05)
                assert b.leading and not a.leading
            tb.cancel()
        finally:
            ta.cancel()
            await asyncio.sleep(0)
            await a.store.aclose()
            await b.store.aclose()
        lost = [f for n, e, f in notes if n == "a" and e == "leader_lost"]
        got_b = [f for n, e, f in notes if n == "b" and e == "leader_acquired"]
        assert len(lost) == 1 and len(got_b) == 1, notes
        assert lost[0]["acted_until"] < got_b[0]["at"]  # type: ignore[operator]
        got_a = [f for n, e, f in notes if n == "a" and e == "leader_acquired"]
        assert got_b[0]["fence"] > got_a[0]["fence"]  # type: ignore[operator]

    with etcd(tmp_path) as url, proxy_to(url) as proxy:
        asyncio.run(go(url, proxy.url, proxy.cut, proxy.heal))


def test_etcd_down_for_a_while_the_leader_stops_acting_and_resumes_its_own_lease(tmp_path: Path) -> None:
    """etcd killed for longer than the lease: the leader stops acting by its own deadline; etcd, started again,
    extends every lease by its duration (its behaviour on a new raft leader), so the key is still the leader's:
    it resumes with the same fencing token, and the standby never held the lease meanwhile."""
    with etcd_server(tmp_path) as server:
        async def go() -> None:
            def elector(name: str) -> Elector:
                return Elector(EtcdLeaseStore([server.url], key="t/leader", timeout_s=1.0), identity=name, **TIMING)

            a, b = elector("a"), elector("b")
            tasks = [asyncio.create_task(a.run())]
            try:
                while not a.leading:
                    await asyncio.sleep(0.05)
                fence = a.state()["fence"]
                tasks.append(asyncio.create_task(b.run()))
                await asyncio.sleep(0.5)
                server.kill()
                down = time.monotonic()
                while a.leading:
                    # its deadline is at most lease_s - margin_s after its last renewal, which was before the kill
                    assert time.monotonic() - down < TIMING["lease_s"] - TIMING["margin_s"], (
                        f"a still acting {time.monotonic() - down:.2f} s after etcd was killed: {a.state()}")
                    await asyncio.sleep(0.02)
                await asyncio.sleep(1.0)
                await asyncio.to_thread(server.start)
                deadline = time.monotonic() + 30
                while not (a.leading or b.leading) and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(1.0)
                assert a.leading and not b.leading and a.state()["fence"] == fence, (
                    f"after etcd came back: a={a.state()} b={b.state()} (fence before the kill: {fence})")
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await a.store.aclose()
                await b.store.aclose()

        asyncio.run(go())
