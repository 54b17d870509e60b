"""A hard wall-clock deadline for one-shot runs (cron's `doctor diagnose`): a watchdog thread that no blocked
event loop, stuck worker thread or starved CPU can outrun. asyncio's time-out only fires when the loop gets to
run; this fires regardless, says why on stderr and ends the process (the kernel releases its flock)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

EXIT_UNUSABLE = 3


def grace_s(timeout_s: float) -> float:
    """How long past --timeout the soft time-out may take to unwind before the hard deadline strikes."""
    return min(10.0, max(2.0, 0.1 * timeout_s))


def hard_exit(err: TextIO, message: str) -> Callable[[], None]:
    """The watchdog's action in a real process: print `message`, flush, exit 3 at once (no cleanup can hang)."""

    def fire() -> None:
        try:
            print(message, file=err, flush=True)
            sys.stdout.flush()
        finally:
            os._exit(EXIT_UNUSABLE)

    return fire


class Watchdog:
    """`with Watchdog(seconds, fire):` runs `fire()` in a daemon thread unless the block ends first."""

    def __init__(self, seconds: float, fire: Callable[[], None]) -> None:
        self._timer = threading.Timer(seconds, fire)
        self._timer.daemon = True
        self._timer.name = "doctor-deadline"

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._timer.cancel()
