"""Standalone mode: the doctor's own cycle (`doctor.cycle.run_cycle`) run in this process over the config's or the
flags' engines, its report turned into the daemon's state document (`doctor.serve.view.report_doc`).

Observe-only unless the config's mode says otherwise (then the cycle applies remedies as `doctor diagnose --fix`
would, within the same guardrails); decisions go through `doctor.remedy.decisions.decide`, as the daemon's API.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from doctor.config import DoctorConfig
from doctor.plan import Plan

HISTORY_POINTS = 60


def local_plan(config: DoctorConfig, state_dir: Path, *, refresh_s: float) -> Plan:
    """The daemon's plan (doctor.serve.daemon.plan_for) for a cycle per refresh, acting only where the config's
    mode (global or a playbook's) is not observe; its trigger `tui`."""
    from doctor.serve.daemon import plan_for

    plan = plan_for(config, state_dir)
    sample = max(0.5, min(config.sample_s, refresh_s))
    acts = config.mode != "observe" or any(p.mode not in (None, "observe") for p in config.playbooks.values())
    return dataclasses.replace(plan, sample_s=sample, window_s=max(config.window_s, sample), fix=acts, trigger="tui")


class LocalSource:
    """One cycle per `state()` call; the state directory keeps the history between them."""

    def __init__(self, config: DoctorConfig, plan: Plan, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.plan = plan
        self.clock = clock
        self.label = f"standalone ({config.mode})"
        self.can_decide = True
        self.cycles = 0
        self._report: dict[str, Any] | None = None

    async def state(self, histograms: str | None = None) -> dict[str, Any]:
        from doctor.cycle import run_cycle
        from doctor.remedy.queue import ActionStore
        from doctor.secrets import Redactor
        from doctor.serve.view import report_doc

        result = await run_cycle(self.plan, clock=self.clock)
        self.cycles += 1
        store = ActionStore(self.plan.state_dir, clock=self.clock)
        token = self._router_token()
        doc = await report_doc(result.report, self.plan.engines, self.plan.state_dir, store, points=HISTORY_POINTS,
                               since_s=600.0, router=self.plan.router, router_token=token, histograms=histograms)
        return Redactor([token]).strings({**doc, "cycles": self.cycles, "cycle_running": False,
                                          "interval_s": self.plan.sample_s, "mode": self.config.mode})

    async def decide(self, verb: str, record_id: str, who: str, reason: str = "") -> dict[str, Any]:
        from doctor.remedy.decisions import decide
        from doctor.remedy.setup import remediator

        rem = remediator(self.config, self.plan.state_dir, router_url=self.plan.router, clock=self.clock,
                         engines=self.plan.engines)
        decided = await decide(rem, verb, record_id, f"{who} (in doctor tui)", reason)
        return {"result": decided.result, "text": decided.text,
                "record": decided.record.to_dict() if decided.record is not None else None}

    def events(self) -> AsyncIterator[tuple[str, dict[str, Any]]] | None:
        return None

    async def aclose(self) -> None:
        return None

    def _router_token(self) -> str | None:
        try:
            return self.config.router.token(os.environ)
        except (OSError, ValueError):  # SecretFileError: a token file anyone may read is refused
            return None  # the policy then shows the router's 401, which says what is missing
