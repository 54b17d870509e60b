"""Router actions in an efficacy run: the virtual router's policy changed as doctor's router actuator changes the
real one (the same policy checks, bounds and inverses)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from doctor.efficacy.harness import EfficacyHarness
from doctor.efficacy.vrouter import VirtualRouter
from doctor.remedy.model import Refused
from playbooks.model import Action
from router.policy import PolicyError, check_limits, with_upstream_state

BATCH_TIMEOUT_BOUNDS_MS = (50, 200)


def apply_router_action(router: VirtualRouter, h: EfficacyHarness, a: Action) -> Action:
    """Change the virtual router's policy as the router actuator would; returns the inverse action."""
    pol, now, p = router.policy, h.now, a.params
    engine = str(p.get("engine", a.target))
    if a.kind == "length_limit":
        tokens = p.get("max_tokens")
        if tokens is None:
            new = replace(pol, length_limit_tokens=None, length_limit_expires_at=None)
        elif isinstance(tokens, int):
            new = replace(pol, length_limit_tokens=tokens,
                          length_limit_expires_at=now + float(p.get("expires_in_s", 3600)))
        else:
            raise Refused(f"length_limit: max_tokens must be a number, got {tokens!r}")
        old = pol.length_limit_tokens if pol.length_limit_active(now) else None
        inv: dict[str, Any] = {"max_tokens": old}
    elif a.kind == "set_route_threshold":
        new = replace(pol, route_threshold_tokens=_int(p, "threshold_tokens", 1))
        inv = {"threshold_tokens": pol.route_threshold_tokens}
    elif a.kind == "set_batch_timeout":
        ms = p.get("batch_timeout_ms")
        lo, hi = BATCH_TIMEOUT_BOUNDS_MS
        if ms is not None and (not isinstance(ms, int) or not lo <= ms <= hi):
            raise Refused(f"set_batch_timeout: {ms!r} ms is outside the bounds {lo}..{hi} ms")
        new = replace(pol, batch_timeout_ms=ms or 0)
        inv = {"engine": engine, "batch_timeout_ms": pol.batch_timeout_ms or None}
    elif a.kind == "set_fairness_window":
        new = replace(pol, fairness_window=_int(p, "window", 0))
        inv = {"window": pol.fairness_window}
    elif a.kind in ("set_max_in_flight", "stop_routing"):
        found = router.upstream(engine)
        if found is None:
            raise Refused(f"{a.kind}: the router has no upstream {engine!r}")
        u = found[1]
        if a.kind == "set_max_in_flight":
            cap = 256 if p.get("max_in_flight") is None else _int(p, "max_in_flight", 1)
            new = replace(pol, upstreams={r: tuple(replace(x, max_in_flight=cap) if x.name == engine else x
                                                   for x in ups) for r, ups in pol.upstreams.items()})
            inv = {"engine": engine, "max_in_flight": u.max_in_flight}
        else:
            state = str(p.get("state") or ("active" if p.get("resume") else "draining"))
            new = with_upstream_state(pol, engine, state)
            inv = {"engine": engine, "state": u.state}
    else:
        raise Refused(f"{a.kind} is not a router action")
    mml = {n: e.core.config.max_model_len for n, e in h.engines.items()}
    try:
        check_limits(new, mml, now=now, previous=pol)
    except PolicyError as exc:
        raise Refused(f"{a.kind}: {exc}") from None
    if not router.set_policy(new):
        raise Refused(f"{a.kind}: already in effect")
    return Action(a.kind, "router", inv)



def _int(p: Any, key: str, lo: int) -> int:
    v = p.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise Refused(f"{key} must be an integer >= {lo}, got {v!r}")
    return v
