"""The router's admission core without an event loop: the I/O (clock, timer, tickets) is the caller's."""

from __future__ import annotations

from collections.abc import Callable

from router.length_limit import LengthLimitTracker
from router.policy import Policy
from router.release import AdmissionCore, AdmissionIo
from router.upstreams import Upstream


class World:
    """A hand-moved clock with timers, and tickets that record what admission did with them."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.granted: dict[str, str] = {}
        self.failed: dict[str, str] = {}

    def io(self) -> AdmissionIo[str]:
        return AdmissionIo(lambda: self.now, lambda when, fn: self.timers.append((when, fn)),
                           lambda t, u: self.granted.__setitem__(t, u.name),
                           lambda t, exc: self.failed.__setitem__(t, str(exc)),
                           lambda t: t in self.granted or t in self.failed)

    def advance(self, to: float) -> None:
        self.now = to
        due = [fn for when, fn in self.timers if when <= to]
        self.timers = [(w, fn) for w, fn in self.timers if w > to]
        for fn in due:
            fn()


def test_the_batch_timeout_releases_the_group_when_the_oldest_has_waited() -> None:
    world = World()
    hot = Upstream("hot", "http://h", "hot", max_in_flight=4)
    cold = Upstream("cold", "http://c", "cold")
    hot.healthy = cold.healthy = True
    core = AdmissionCore({"hot": [hot], "cold": [cold]}, lambda: Policy(batch_timeout_ms=100), world.io())
    assert core.take_now("hot", core.next_seq()) is None  # a batch timeout holds requests back
    for name in ("a", "b"):
        core.enqueue("hot", 10, name, core.next_seq())
    world.advance(0.05)
    assert world.granted == {}
    world.advance(0.1)
    assert world.granted == {"a": "hot", "b": "hot"} and hot.in_flight == 2


def test_a_role_without_upstreams_hands_its_waiters_over_where_they_fit() -> None:
    world = World()
    hot, cold = Upstream("hot", "http://h", "hot", max_in_flight=1), Upstream("cold", "http://c", "cold")
    hot.healthy = cold.healthy = True
    cold.max_model_len = 1000
    core = AdmissionCore({"hot": [hot], "cold": [cold]}, lambda: Policy(fairness_window=0), world.io())
    held = core.take_now("hot", core.next_seq())
    assert held is hot
    core.enqueue("hot", 10, "fits", core.next_seq())
    core.enqueue("hot", 5000, "too-long", core.next_seq())
    hot.healthy = False
    core.pump_all()
    assert world.granted == {"fits": "cold"} and "does not fit" in world.failed["too-long"]


def test_the_length_limit_tracker_counts_idle_time_from_the_last_refusal() -> None:
    limit = Policy(length_limit_tokens=100)
    t = LengthLimitTracker(now=0.0)
    assert t.idle_s(Policy(), 50.0) is None
    t.policy_changed(Policy(), limit, 10.0)
    assert t.idle_s(limit, 70.0) == 60.0
    t.refused(80.0)
    assert t.idle_s(limit, 100.0) == 20.0 and t.refusals_since(79.0) == 1 and t.refusals_since(80.0) == 0
    t.policy_changed(limit, limit, 200.0)  # the same limit: the idle time goes on
    assert t.idle_s(limit, 200.0) == 120.0
