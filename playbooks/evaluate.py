"""Run every playbook over every engine, with `for` durations and hysteresis kept across runs.

State is a plain mapping (persisted by the caller: the state directory for cron, memory for the
harness): key `playbook|engine` -> {"onset": t, "last": t}. A condition that has held since `onset`
for at least the playbook's `for_s` becomes a Finding whose id is stable for the whole incident.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from playbooks.base import EngineView, Playbook
from playbooks.model import SEVERITY_RANK, Finding, confidence_from
from playbooks.registry import all_playbooks, precedence

STALE_AFTER_S = 900.0  # a condition not seen for this long starts a new incident
ParamsFor = Callable[[Playbook, str], Mapping[str, float]]


def default_params(playbook: Playbook, engine: str) -> Mapping[str, float]:
    return playbook.defaults


def _no_data(pb: Playbook, view: EngineView) -> bool:
    """None of the playbook's signals has a value in this window."""
    names = [s for s in pb.signals if s not in ("health", "events")]
    return bool(names) and view.signals.health == "ok" and all(view.value(s) is None for s in names)


def evaluate(views: Sequence[EngineView], state: MutableMapping[str, dict[str, Any]], *, now: float,
             playbooks: Sequence[Playbook] | None = None, params_for: ParamsFor = default_params,
             window_is_history: bool = False, enabled: Callable[[Playbook, str], bool] | None = None
             ) -> list[Finding]:
    """Findings for all engines, most severe first.

    `window_is_history`: the signals summarise the whole window (Prometheus `--since`), so a condition
    seen in them has held for the window length.
    """
    findings: list[Finding] = []
    for view in views:
        for pb in playbooks or all_playbooks():
            if enabled is not None and not enabled(pb, view.name):
                continue
            key = f"{pb.id}|{view.name}"
            st = state.get(key)
            if st is not None and now - float(st.get("last", now)) > STALE_AFTER_S:
                st = None
                state.pop(key, None)
            pv = dataclasses.replace(view, params={**pb.defaults, **params_for(pb, view.name)},
                                     active=st is not None)
            if not pb.applies_to(pv):
                continue
            cond = pb.check(pv)
            if cond is None:
                if st is not None and _no_data(pb, pv):
                    continue  # nothing measured this time (e.g. no request finished): neither held nor cleared
                state.pop(key, None)
                continue
            onset = float(st["onset"]) if st is not None else now
            if window_is_history:
                onset = min(onset, now - view.window_s)
            state[key] = {"onset": onset, "last": now}
            if now - onset < pb.for_s:
                continue
            findings.append(Finding(
                playbook=pb.id, engine=view.name, severity=cond.severity or pb.severity,
                confidence=confidence_from(cond.agreeing, cond.considered), summary=cond.summary,
                evidence=cond.evidence, remedies=tuple(pb.remedies(pv, cond)), runbook=pb.runbook_anchor(),
                onset=onset, title=pb.title,
            ))
    findings.sort(key=lambda f: (-SEVERITY_RANK[f.severity], precedence(f.playbook), f.engine))
    return findings
