"""The virtual router: the real router's policy semantics on the harness's virtual clock."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from doctor.efficacy.harness import EfficacyHarness, Outcome
from router.policy import ROLES, Policy, UpstreamSpec, diff
from sim.workload import RequestSpec

HEALTH_EVERY_S = 2.0  # the router's health loop


@dataclass(eq=False)
class _Waiter:
    seq: int
    role: str
    tokens: int
    arrived: float
    out: Outcome
    passed: int = 0


class VirtualRouter:
    """The router's policy semantics (router/proxy.py, router/admission.py) on the harness's virtual clock."""

    def __init__(self, h: EfficacyHarness, policy: Policy) -> None:
        self.h = h
        self.policy = policy
        self.in_flight: dict[str, int] = {}
        self.down: set[str] = set()  # upstreams whose engine is stopped for a change
        self.queues: dict[str, list[_Waiter]] = {r: [] for r in ROLES}
        self.outcomes: list[Outcome] = []
        self.changes: list[tuple[float, str]] = []  # (virtual time, policy diff line)
        self._due: dict[str, float | None] = {r: None for r in ROLES}
        self._seq = 0
        self.length_limit_since = h.now  # router_length_limit_idle_seconds, as router/app.py keeps it
        self.length_limit_last_rejection: float | None = None
        self.length_limit_refusals: list[float] = []  # when each request was refused for the limit
        h.schedule(h.now + HEALTH_EVERY_S, self._health)

    # ----- policy and upstreams ------------------------------------------------------------------

    def set_policy(self, new: Policy) -> list[str]:
        changes = diff(self.policy, new)
        if new.length_limit_rule() != self.policy.length_limit_rule():
            self.length_limit_since, self.length_limit_last_rejection = self.h.now, None
        self.policy = new
        self.changes += [(self.h.now, c) for c in changes]
        self.pump_all()
        return changes

    def length_limit_signals(self) -> dict[str, float | None]:
        """The router signals doctor reads from router_length_limit_tokens and router_length_limit_idle_seconds."""
        now, pol = self.h.now, self.policy
        if not pol.length_limit_active(now) or pol.length_limit_tokens is None:
            return {"length_limit_tokens": 0.0, "length_limit_idle_s": None}
        since = max(self.length_limit_since, self.length_limit_last_rejection or self.length_limit_since)
        return {"length_limit_tokens": float(pol.length_limit_tokens), "length_limit_idle_s": now - since}

    def upstream(self, name: str) -> tuple[str, UpstreamSpec] | None:
        for role, u in self.policy.all_upstreams():
            if u.name == name:
                return role, u
        return None

    def healthy(self, name: str) -> bool:
        e = self.h.engines.get(name)
        return e is not None and not e.core.dead and self.h.listening(name) and name not in self.down

    def _eligible(self, role: str) -> list[UpstreamSpec]:
        return [u for u in self.policy.upstreams.get(role, ()) if u.state == "active" and self.healthy(u.name)]

    def fits(self, role: str, tokens: int) -> bool:
        return any(tokens < self.h.engines[u.name].core.config.max_model_len for u in self._eligible(role))

    def _best(self, ups: list[UpstreamSpec]) -> UpstreamSpec | None:
        best, room = None, 0
        for u in ups:
            free = u.max_in_flight - self.in_flight.get(u.name, 0)
            if free > room:
                best, room = u, free
        return best

    def _health(self) -> None:
        self.pump_all()
        self.h.schedule(self.h.now + HEALTH_EVERY_S, self._health)

    # ----- requests ------------------------------------------------------------------------------

    def submit(self, spec: RequestSpec, at: float) -> Outcome:
        out = Outcome(spec, at)
        self.outcomes.append(out)
        self.h.schedule(at, functools.partial(self._arrive, out))
        return out

    def _arrive(self, out: Outcome) -> None:
        pol, now, tokens = self.policy, self.h.now, out.spec.prompt_tokens
        if pol.length_limit_tokens is not None and tokens > pol.length_limit_tokens and pol.length_limit_active(now):
            out.rejected = 413
            self.length_limit_last_rejection = now
            self.length_limit_refusals.append(now)
            return
        routed = "hot" if tokens < pol.route_threshold_tokens else "cold"
        role = routed if self._eligible(routed) else ("cold" if routed == "hot" else "hot")
        out.role = routed
        if role != routed and not self.fits(role, tokens):
            out.rejected = 503
            return
        out.role = role
        q = self.queues[role]
        if not q and pol.batch_timeout_ms == 0:
            u = self._best(self._eligible(role))
            if u is not None:
                self._dispatch(u, out)
                return
        if len(q) >= pol.max_queue:
            out.rejected = 429
            return
        self._seq += 1
        q.append(_Waiter(self._seq, role, tokens, now, out))
        self.pump(role)

    def _dispatch(self, u: UpstreamSpec, out: Outcome) -> None:
        self.in_flight[u.name] = self.in_flight.get(u.name, 0) + 1
        out.upstream = u.name
        out.record = self.h.submit(u.name, out.spec, at=self.h.now, on_finish=functools.partial(self._release, u.name))

    def _release(self, name: str) -> None:
        self.in_flight[name] -= 1
        found = self.upstream(name)
        if found is not None:
            self.pump(found[0])

    # ----- the release rule ----------------------------------------------------------------------

    def pump(self, role: str) -> None:
        q = self.queues[role]
        if not q:
            return
        ups = self._eligible(role)
        if not ups:
            self._reroute(role)
            return
        free = sum(max(0, u.max_in_flight - self.in_flight.get(u.name, 0)) for u in ups)
        if free <= 0:
            return
        pol, now = self.policy, self.h.now
        wait_s = pol.batch_timeout_ms / 1000.0
        if wait_s > 0 and len(q) < free and now < q[0].arrived + wait_s:
            self._arm(role, q[0].arrived + wait_s)
            return
        for _ in range(min(len(q), free)):
            w = _pick(q, pol.fairness_window)
            u = self._best(ups)
            assert u is not None
            self._dispatch(u, w.out)
        if q and wait_s > 0:
            self._arm(role, max(now, q[0].arrived + wait_s))

    def _arm(self, role: str, due: float) -> None:
        cur = self._due[role]
        if cur is not None and cur <= due:
            return
        self._due[role] = due

        def fire() -> None:
            if self._due[role] == due:
                self._due[role] = None
                self.pump(role)

        self.h.schedule(due, fire)

    def _reroute(self, role: str) -> None:
        """`role` has no eligible upstream: waiters move to the other role where they fit, else fail (503)."""
        q = self.queues[role]
        dest = "cold" if role == "hot" else "hot"
        moved = False
        for w in q:
            if self._eligible(dest) and self.fits(dest, w.tokens):
                w.role = dest
                self.queues[dest].append(w)
                moved = True
            else:
                w.out.rejected = 503
        q.clear()
        if moved:
            self.queues[dest].sort(key=lambda w: (w.arrived, w.seq))
            self.pump(dest)

    def pump_all(self) -> None:
        for role in ROLES:
            if self.queues[role] and not self._eligible(role):
                self._reroute(role)
        for role in ROLES:
            self.pump(role)


def _pick(q: list[_Waiter], window: int) -> _Waiter:
    """Shortest prompt first, except that a waiter passed by `window` later ones goes next (admission._pick)."""
    if window <= 0 or len(q) == 1:
        return q.pop(0)
    idx = next((i for i, w in enumerate(q) if w.passed >= window), -1)
    if idx < 0:
        idx = min(range(len(q)), key=lambda i: (q[i].tokens, q[i].seq))
    for w in q[:idx]:
        w.passed += 1
    return q.pop(idx)



def without(policy: Policy, name: str) -> Policy:
    """`policy` with the upstream `name` removed."""
    ups = policy.upstreams.items()
    return replace(policy, upstreams={r: tuple(u for u in specs if u.name != name) for r, specs in ups})
