"""The admission rules without HTTP: group release by batch timeout, fairness window, overflow, failover."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from router.admission import Admission, NoUpstream, QueueFull, Upstream
from router.policy import Policy


def _setup(policy: Policy, slots: int = 2) -> tuple[Admission, Upstream, Upstream, list[Policy]]:
    hot, cold = Upstream("hot", "http://h", "hot", max_in_flight=slots), Upstream("cold", "http://c", "cold")
    hot.healthy = cold.healthy = True
    box = [policy]
    adm = Admission({"hot": [hot], "cold": [cold]}, lambda: box[0], lambda role, tokens: tokens < 100)
    return adm, hot, cold, box


def test_batch_timeout_zero_releases_at_once_and_caps_in_flight() -> None:
    async def main() -> None:
        adm, hot, _, _ = _setup(Policy(batch_timeout_ms=0, fairness_window=0), slots=2)
        a = await adm.acquire("hot", 5)
        b = await adm.acquire("hot", 5)
        assert a is b is hot and hot.in_flight == 2
        third = asyncio.ensure_future(adm.acquire("hot", 5))
        await asyncio.sleep(0)
        assert not third.done() and adm.queue_length("hot") == 1
        adm.release(hot, 0.01)
        assert await third is hot and hot.in_flight == 2

    asyncio.run(main())


def test_batch_timeout_releases_a_full_group_or_after_the_timeout() -> None:
    async def main() -> None:
        adm, hot, _, _ = _setup(Policy(batch_timeout_ms=1000, fairness_window=0), slots=3)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        first = [asyncio.ensure_future(adm.acquire("hot", 5)) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert not any(f.done() for f in first)  # 2 waiting < 3 free slots: wait for the group
        third = asyncio.ensure_future(adm.acquire("hot", 5))
        await asyncio.sleep(0)
        await asyncio.gather(*first, third)  # the group filled the free slots: released together
        # the longest timeout the policy allows, so that a stalled machine cannot be mistaken for it
        assert loop.time() - t0 < 1.0 and hot.in_flight == 3
        for _ in range(3):
            adm.release(hot, 0.0)
        lone = asyncio.ensure_future(adm.acquire("hot", 5))
        await asyncio.sleep(0.05)
        assert not lone.done()
        await lone  # released when the oldest has waited batch_timeout_ms
        assert loop.time() - t0 >= 1.0

    asyncio.run(main())


def test_fairness_window_bounds_how_many_short_requests_pass_a_long_one() -> None:
    async def main() -> None:
        adm, hot, _, _ = _setup(Policy(batch_timeout_ms=0, fairness_window=2), slots=1)
        held = await adm.acquire("hot", 5)
        waiting = [asyncio.ensure_future(adm.acquire("hot", 900, seq=100))]
        for i in range(5):
            waiting.append(asyncio.ensure_future(adm.acquire("hot", 5, seq=101 + i)))
        await asyncio.sleep(0)
        order = []
        adm.dispatch_log.clear()
        adm.release(held, 0.0)
        for _ in range(6):
            await asyncio.sleep(0)
            order.append(adm.dispatch_log[-1][1])
            adm.release(hot, 0.0)
        assert order == [101, 102, 100, 103, 104, 105]
        await asyncio.gather(*waiting)

    asyncio.run(main())


def test_overflow_and_no_upstream_and_failover_of_waiters() -> None:
    async def main() -> None:
        adm, hot, cold, box = _setup(Policy(max_queue=1), slots=1)
        await adm.acquire("hot", 5)
        short = asyncio.ensure_future(adm.acquire("hot", 5))
        await asyncio.sleep(0)
        with pytest.raises(QueueFull) as exc:
            await adm.acquire("hot", 5)
        assert exc.value.retry_after >= 1
        box[0] = replace(box[0], max_queue=2)
        too_long = asyncio.ensure_future(adm.acquire("hot", 500))  # does not fit cold (fits: tokens < 100)
        await asyncio.sleep(0)
        hot.healthy = False
        adm.pump_all()
        assert await short is cold  # moved to the other role
        with pytest.raises(NoUpstream):
            await too_long
        with pytest.raises(NoUpstream):
            await adm.acquire("hot", 5)

    asyncio.run(main())


def test_a_cancelled_waiter_leaves_the_queue_and_keeps_no_slot() -> None:
    async def main() -> None:
        adm, hot, _, _ = _setup(Policy(), slots=1)
        await adm.acquire("hot", 5)
        w = asyncio.ensure_future(adm.acquire("hot", 5))
        await asyncio.sleep(0)
        w.cancel()
        await asyncio.sleep(0)
        assert adm.queue_length("hot") == 0
        adm.release(hot, 0.0)
        assert hot.in_flight == 0

    asyncio.run(main())
