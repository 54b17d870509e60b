"""The cyclic garbage collector paused while a large answer is decoded and mapped.

A Prometheus answer for 200 engines is ~55,000 series: ~300,000 dicts, lists and strings built in a burst,
none of them in a reference cycle. Each burst trips the collector's thresholds again and again, and every
full collection walks everything the process holds (the answers already mapped, the imported modules).
bench/fleet_read.py, 1,000 engines: 3.5 s of a 9 s `doctor diagnose` were the collector, 2.9 s of it full
collections, 1.7 s inside the answers' `json` decode. Reference counting frees everything as usual while
paused; only cycles wait for the collector, which runs again when the last pause ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector for the block; nested and concurrent pauses (threads) end with the last."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
