"""gc_paused: the cyclic collector is off inside, back on after the last of nested or concurrent pauses, and left
off when it was off before."""

from __future__ import annotations

import gc
import threading

import pytest

from collectors.gcpause import gc_paused


def test_nested_pauses_end_with_the_outermost() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner end does not re-enable it under the outer pause
    assert gc.isenabled()


def test_an_exception_inside_still_re_enables() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_concurrent_pauses_in_threads_end_with_the_last() -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with gc_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with gc_paused():
            second_in.set()
            first_out.wait(10)
            seen["after the first ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
