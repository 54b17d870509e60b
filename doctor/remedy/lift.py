"""When an emergency length limit the doctor set is no longer needed, and may be lifted early.

An emergency limit (413 for prompts over N tokens) always carries an expiry, an hour by default, so a
3 a.m. limit cannot outlive its incident by more than that. Within the hour it is lifted early when all
of these hold:

- the doctor set it (its own verified `length_limit` action) and the router still has that very limit
  (a limit a person set or changed since is never touched);
- it has refused nothing for `length_limit_lift_after_s` (the router's `router_length_limit_idle_seconds`),
  or at most `length_limit_lift_max_refusals` requests over that long (the router's refusal counter, through
  the doctor's history): nobody is sending the prompts it sheds any more, or only the trickle of long documents
  the cold path served before the storm (which would otherwise keep the limit for its whole hour);
- no engine shows queue pressure (`waiting` and P95 queue time under the `queue_pressure` thresholds);
- the action's cooldown is over, so the doctor could put the limit back at once if the storm returns;
- no finding of the same run still proposes a length limit (checked by the caller, which has the findings).

A record whose limit has expired, or is no longer at the router as the doctor set it, is ended (`expired`)
whatever the mode: that only keeps `doctor actions` true. `judge` decides from one reading;
`doctor.remedy.executor.Remediator.lift_idle_limits` acts on it. `already_in_force` keeps the doctor from applying a
limit the router already has (which would only push its expiry out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from collectors.types import Signals
from doctor.remedy.model import ActionRecord
from playbooks.model import Action

QueueLimits = Callable[[str], Mapping[str, float]]  # engine name -> queue_pressure thresholds


@dataclass(frozen=True)
class LiftDecision:
    """`lift`: take the limit off now; `done`: the record needs no more looking at (the limit is gone or no
    longer the doctor's); neither: keep it and look again next run. `reason` says why, for the audit."""

    lift: bool
    done: bool
    reason: str


KEEP = LiftDecision(False, False, "")


def limit_tokens(rec: ActionRecord) -> int | None:
    """The limit a doctor's verified `length_limit` record put in force (None: not such a record)."""
    if rec.kind != "length_limit" or rec.status != "verified":
        return None
    tokens = rec.action.get("params", {}).get("max_tokens")
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def _router_value(signals: Mapping[str, Signals], name: str) -> float | None:
    """A router-wide signal (every engine's reading carries the same value)."""
    return next((v for s in signals.values() if (v := s.get(name)) is not None), None)


def judge(rec: ActionRecord, signals: Mapping[str, Signals], *, lift_after_s: float, queue_limits: QueueLimits,
          cooldown_left_s: float, now: float, refused_in_window: float | None = None,
          max_refusals: float = 0.0) -> LiftDecision:
    """Should the limit `rec` set be lifted now (see the module docstring)?"""
    tokens = limit_tokens(rec)
    if tokens is None:
        return KEEP
    expires_in = rec.action.get("params", {}).get("expires_in_s")
    if isinstance(expires_in, int | float) and now >= rec.created_at + float(expires_in):
        return LiftDecision(False, True, f"expired {float(expires_in):.0f} s after it was set")
    if lift_after_s <= 0:
        return KEEP
    in_force = _router_value(signals, "length_limit_tokens")
    if in_force is None:
        return LiftDecision(False, False, "the router's length limit is not readable")
    if in_force <= 0:
        return LiftDecision(False, True, "no longer in force at the router: lifted before its expiry (by a person, "
                                         "or by a doctor run that stopped before it could record it)")
    if int(in_force) != tokens:
        return LiftDecision(False, True, f"the router's limit is now {int(in_force)} tokens, set by someone else: "
                                         "no longer the doctor's to lift")
    idle = _router_value(signals, "length_limit_idle_s")
    quiet = idle is not None and idle >= lift_after_s
    # A window that began before the limit was set would count too few refusals.
    trickle = (not quiet and refused_in_window is not None and refused_in_window <= max_refusals
               and now - rec.created_at >= lift_after_s)
    if not quiet and not trickle:
        if idle is None:
            return LiftDecision(False, False, "how long it has refused nothing is not readable")
        over = "" if refused_in_window is None else \
            f"; {refused_in_window:.0f} refused in the last {lift_after_s:g} s (> {max_refusals:g})"
        return LiftDecision(False, False, f"refused a request {idle:.0f} s ago{over}")
    if cooldown_left_s > 0:
        return LiftDecision(False, False, f"its cooldown has {cooldown_left_s:.0f} s left: it could not be put back")
    queued = _queued(signals, rec.engine, queue_limits)
    if queued:
        return LiftDecision(False, False, queued)
    if trickle:
        return LiftDecision(True, False, f"refused only {refused_in_window:.0f} requests in the last "
                                         f"{lift_after_s:g} s (<= {max_refusals:g}: a trickle, not a storm) and no "
                                         "engine has a queue")
    return LiftDecision(True, False, f"refused nothing for {idle:.0f} s (>= {lift_after_s:g} s) and no engine "
                                     "has a queue")


def already_in_force(action: Action, signals: Mapping[str, Signals]) -> str:
    """Why `action` would change nothing ('' when it would): a length limit the router already has in force.
    Re-applying it would only push its expiry out, so the limit could outlive the incident."""
    p = action.params
    tokens = p.get("max_tokens")
    if action.kind != "length_limit" or not isinstance(tokens, int) or p.get("restore") or "client" in p \
            or "model" in p:
        return ""
    if _router_value(signals, "length_limit_tokens") != float(tokens):
        return ""
    return (f"the router already refuses prompts over {tokens} tokens (an emergency limit in force): nothing to "
            "change, and its expiry stays")


def _queued(signals: Mapping[str, Signals], protected: str, queue_limits: QueueLimits) -> str:
    """Why some engine's queue forbids lifting ('' when none does); the protected engine must be readable."""
    if signals.get(protected) is None or signals[protected].get("waiting") is None:
        return f"{protected}'s queue is not readable"
    for name, s in sorted(signals.items()):
        limits = queue_limits(name)
        waiting, p95 = s.get("waiting"), s.get("p95_queue_s")
        if waiting is not None and waiting > limits["waiting"]:
            return f"{name} has {waiting:g} requests waiting (> {limits['waiting']:g})"
        if p95 is not None and p95 >= limits["p95_queue_s"]:
            return f"{name}'s P95 queue time is {p95:.2g} s (>= {limits['p95_queue_s']:g} s)"
    return ""


def counter_increase(history: Sequence[tuple[float, float]], current: float | None, *, window_s: float,
                     now: float) -> float | None:
    """How much a counter grew over the last `window_s`: `current` minus its value in the newest history point at
    least `window_s` old. None without such a point, or when the counter went down (the router restarted)."""
    if current is None:
        return None
    old = [v for t, v in history if t <= now - window_s]
    if not old or current < old[-1]:
        return None
    return current - old[-1]

