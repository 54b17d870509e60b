"""uvicorn's server without its ten wake-ups a second.

`uvicorn.Server.main_loop` sleeps 0.1 s at a time to look for a stop request and to refresh the Date header once a
second. Each wake-up of an otherwise idle event loop costs ~0.2 ms of CPU on the 2-core machine here (a bare
asyncio loop sleeping 0.1 s at a time: 0.22% of a core; the daemon with no cycle due: 0.20%), a tenth of the
daemon's budget of 2% of a core. This one wakes once a second for the header, and at once when a signal asks it to
stop (`handle_exit` is uvicorn's signal handler).
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn

TICK_S = 1.0  # the Date header's resolution, as uvicorn refreshes it


class QuietServer(uvicorn.Server):
    """A uvicorn.Server whose main loop waits on an event instead of polling every 0.1 s."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def main_loop(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):  # a multiple of 10: uvicorn refreshes the Date header on it
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), TICK_S)
