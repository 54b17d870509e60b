"""Drive an engine in real time on an asyncio loop: steps take their modelled duration on the wall clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from sim.engine import EngineCore
from sim.gpu import Activity
from sim.request import SimRequest
from sim.runtime import EngineRuntime

REPORT_EVERY_S = 0.25  # the GPU ledger hears from a busy engine this often (dcgm-exporter's view)


class RealtimeDriver:
    """Runs steps back to back while there is work, and the runtime's timers when idle."""

    def __init__(self, runtime: EngineRuntime, clock: Callable[[], float] = time.time) -> None:
        self.runtime = runtime
        self.clock = clock
        self._wake = asyncio.Event()
        self._stopped = False
        self._reported_at = float("-inf")
        self._reported: tuple[float, ...] = ()
        self.on_death: Callable[[], None] | None = None

    @property
    def core(self) -> EngineCore:
        return self.runtime.core

    def notify(self) -> None:
        """Something changed (a request arrived, the engine woke up): re-check now."""
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def report_gpu(self, now: float, every_s: float = REPORT_EVERY_S) -> None:
        """Tell the node's ledger what the engine holds and how busy it keeps its GPUs (dcgm-exporter's view).

        Activity is written when it changed, and again before the exporter would take it as stale.
        """
        core = self.core
        if core.dead or now - self._reported_at < every_s:
            return
        core.sync_ledger(now)  # memory held now (fragmentation grows between the stats lines)
        ratios = core.busy.ratios(now) if core.serving else (0.0, 0.0, 0.0)
        rounded = tuple(round(r, 3) for r in ratios)
        if rounded == self._reported and (not any(rounded) or now - self._reported_at < 1.0):
            return
        self._reported_at, self._reported = now, rounded
        core.ledger.report(core.owner, Activity(*ratios, now))

    async def add_request(self, req: SimRequest) -> None:
        """Pass through the frontend (tokenisation time), then queue in the engine core."""
        await asyncio.sleep(self.core.frontend_delay(req.num_prompt))
        self.core.add_request(req, self.clock())
        self.notify()

    async def run(self) -> None:
        was_dead = False
        while not self._stopped:
            now = self.clock()
            self.runtime.tick(now)
            self.report_gpu(now)
            if self.core.dead and not was_dead:
                was_dead = True
                if self.on_death is not None:
                    self.on_death()
            step = self.core.schedule(now)
            if step is not None:
                await asyncio.sleep(max(0.0, step.end - self.clock()))
                self.core.complete(step, self.clock())
                continue
            self._wake.clear()
            timeout = max(0.0, self.runtime.next_deadline() - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(timeout, REPORT_EVERY_S))
