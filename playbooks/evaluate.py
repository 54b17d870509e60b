"""Run every playbook over every engine, with `for` durations and hysteresis kept across runs.

State is a plain mapping (persisted by the caller: the state directory for cron, memory for the
harness): key `playbook|engine` -> {"onset": t, "last": t}. A condition that has held since `onset`
for at least the playbook's `for_s` becomes a Finding whose id is stable for the whole incident; one that
holds but has not lasted its `for` yet is a pending Finding (like a pending Prometheus alert), given to the
caller apart so it never changes the exit code. A signal built from too few requests (Signals.weak) is not
seen by the playbooks: a condition that rests on one neither starts, holds nor clears the `for`, and is
reported pending with the reason when it would hold on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import SEVERITY_RANK, Finding, confidence_from
from playbooks.registry import all_playbooks, precedence

STALE_AFTER_S = 900.0  # a condition not seen for this long starts a new incident
GAP_S = 60.0  # a pending condition unseen (weak or no data) for longer than this and its `for` starts afresh
# A state time this far after now means the clock went back. Less is two doctors (cron beside the daemon) whose
# cycles read at slightly different moments: the one that read first judges a `now` older than the other's update.
CLOCK_BACK_S = 300.0
ParamsFor = Callable[[Playbook, str], Mapping[str, float]]


def default_params(playbook: Playbook, engine: str) -> Mapping[str, float]:
    return playbook.defaults


def _no_data(pb: Playbook, view: EngineView) -> bool:
    """None of the playbook's signals has a value in this window."""
    names = [s for s in pb.signals if s not in ("health", "events")]
    return bool(names) and view.signals.health == "ok" and all(view.value(s) is None for s in names)


def _finding(pb: Playbook, view: EngineView, cond: Condition, onset: float, now: float, **extra: Any) -> Finding:
    finding = Finding(
        playbook=pb.id, engine=view.name, severity=cond.severity or pb.severity,
        confidence=confidence_from(cond.agreeing, cond.considered), summary=cond.summary,
        evidence=cond.evidence, remedies=tuple(pb.remedies(view, cond)), runbook=pb.runbook_anchor(),
        onset=onset, title=pb.title, for_s=pb.for_s, held_s=max(0.0, now - onset))
    return dataclasses.replace(finding, **extra) if extra else finding


def _weak_note(pb: Playbook, view: EngineView) -> str:
    weak = {s: view.signals.weak[s] for s in pb.signals if view.signals.is_weak(s)}
    listed = ", ".join(f"{s} from {n:g}" for s, n in weak.items())
    return (f"too few requests in the {view.window_s:g}s window to judge ({listed}): this neither starts nor "
            "clears the `for`; a longer window (--window, or cron runs keeping the state directory) will tell")


def evaluate(views: Sequence[EngineView], state: MutableMapping[str, dict[str, Any]], *, now: float,
             playbooks: Sequence[Playbook] | None = None, params_for: ParamsFor = default_params,
             window_is_history: bool = False, enabled: Callable[[Playbook, str], bool] | None = None,
             pending: list[Finding] | None = None) -> list[Finding]:
    """Findings for all engines, most severe first; conditions still inside their `for` go to `pending`.

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
                weak = any(view.signals.is_weak(s) for s in pb.signals)
                if st is not None and (weak or _no_data(pb, pv)):
                    continue  # nothing (or too little) measured this time: neither held nor cleared
                state.pop(key, None)
                if weak and pending is not None:
                    seen = dataclasses.replace(pv, show_weak=True)
                    raw = pb.check(seen)
                    if raw is not None:
                        pending.append(_finding(pb, seen, raw, now, now, status="pending", note=_weak_note(pb, pv),
                                                confidence=0.25))
                continue
            onset = float(st["onset"]) if st is not None else now
            if st is not None and now - float(st.get("last", now)) > max(pb.for_s, GAP_S):
                onset = now  # unknown (too few requests, no data) for longer than its `for`: it starts afresh
            if st is not None and (onset > now + CLOCK_BACK_S or float(st.get("last", now)) > now + CLOCK_BACK_S):
                onset = now  # the clock went back: the `for` starts afresh (else it would wait out the jump)
            if window_is_history:
                onset = min(onset, now - view.window_s)
            state[key] = {"onset": onset, "last": now}
            if now - onset < pb.for_s:
                if pending is not None:
                    pending.append(_finding(pb, pv, cond, onset, now, status="pending"))
                continue
            findings.append(_finding(pb, pv, cond, onset, now))
    findings.sort(key=lambda f: (-SEVERITY_RANK[f.severity], precedence(f.playbook), f.engine))
    if pending is not None:
        pending.sort(key=lambda f: (-SEVERITY_RANK[f.severity], f.fires_in_s, precedence(f.playbook), f.engine))
    return findings
