"""The virtual router: the real router's decisions (router.decide, router.release, router.upstreams,
router.length_limit) on the harness's virtual clock. Only the I/O is the harness's: time, timers, health (the
simulated engine is alive and not stopped for a change) and dispatch (a request submitted to the sim engine)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from router.decide import length_limit_refuses, route
from router.length_limit import LengthLimitTracker
from router.policy import ROLES, Policy, UpstreamSpec, check_limits, diff, parse_versioned
from router.release import AdmissionCore, AdmissionIo, NoUpstream, QueueFull
from router.upstreams import Upstream, UpstreamSet
from sim.workload import RequestSpec
from trials.efficacy.harness import EfficacyHarness, Outcome

HEALTH_EVERY_S = 2.0  # the router's health loop


def engine_url(name: str) -> str:
    """The URL a sim engine is known by in the router's policy (never dialled: requests go to the harness)."""
    return f"http://{name}.sim"


class VirtualRouter:
    """The router's admission, routing and length limit over the harness's sim engines, in virtual time."""

    def __init__(self, h: EfficacyHarness, policy: Policy, *, model: str | None = None, client: str = "") -> None:
        self.h = h
        self.policy = policy
        self.model, self.client = model, client  # what a request carries unless submit says otherwise
        self.down: set[str] = set()  # upstreams whose engine is stopped for a change
        self.outcomes: list[Outcome] = []
        self.changes: list[tuple[float, str]] = []  # (virtual time, policy diff line)
        self.version = 1  # of the policy document, as the router's policy API counts it
        self.upstreams = UpstreamSet()
        self.length_limit = LengthLimitTracker(h.now)  # router_length_limit_idle_seconds, as router/app.py keeps it
        io: AdmissionIo[Outcome] = AdmissionIo(lambda: self.h.now, self._call_at, self._dispatch, self._fail,
                                               _settled)
        self.admission = AdmissionCore(self.upstreams.pools, lambda: self.policy, io)
        self.upstreams.sync(policy)
        h.schedule(h.now + HEALTH_EVERY_S, self._health)

    # ----- policy and upstreams ------------------------------------------------------------------

    def policy_document(self) -> dict[str, Any]:
        """What GET /router/policy answers (router.app.Router.policy_document, less its token method)."""
        self._refresh()
        return {"version": self.version, "updated_at": self.h.now, **self.policy.to_dict(),
                "status": {"length_limit_active": self.policy.length_limit_active(self.h.now),
                           "queues": {r: self.admission.queue_length(r) for r in ROLES},
                           "upstreams": {u.name: u.status() for u in self.upstreams.all()}}}

    def put_policy(self, doc: Any) -> list[str]:
        """PUT /router/policy: the router's checks (PolicyError), then the change; returns its diff lines."""
        new = parse_versioned(doc, version=self.version, now=self.h.now)
        check_limits(new, {n: e.core.config.max_model_len for n, e in self.h.engines.items()}, now=self.h.now,
                     previous=self.policy)
        return self.set_policy(new)

    def set_policy(self, new: Policy) -> list[str]:
        changes = diff(self.policy, new)
        self.length_limit.policy_changed(self.policy, new, self.h.now)
        self.policy = new
        self.version += 1
        self.changes += [(self.h.now, c) for c in changes]
        self.upstreams.sync(new)
        self._refresh()
        self.admission.pump_all()
        return changes

    def length_limit_signals(self) -> dict[str, float | None]:
        """The router signals doctor reads from router_length_limit_tokens and router_length_limit_idle_seconds."""
        idle = self.length_limit.idle_s(self.policy, self.h.now)
        if idle is None or self.policy.length_limit_tokens is None:
            return {"length_limit_tokens": 0.0, "length_limit_idle_s": None}
        return {"length_limit_tokens": float(self.policy.length_limit_tokens), "length_limit_idle_s": idle}

    def upstream(self, name: str) -> tuple[str, UpstreamSpec] | None:
        for role, u in self.policy.all_upstreams():
            if u.name == name:
                return role, u
        return None

    def in_flight(self, name: str) -> int:
        """Requests in flight on upstream `name` (one still finishing after its removal included)."""
        return sum(u.in_flight for u in (*self.upstreams.all(), *self.upstreams.detached) if u.name == name)

    def healthy(self, name: str) -> bool:
        e = self.h.engines.get(name)
        return e is not None and not e.core.dead and self.h.listening(name) and name not in self.down

    def _refresh(self) -> None:
        """Health and max_model_len as the router's probes would find them (read live from the sim)."""
        for u in self.upstreams.all():
            u.healthy = self.healthy(u.name)
            e = self.h.engines.get(u.name)
            u.max_model_len = e.core.config.max_model_len if e is not None else u.max_model_len

    def _health(self) -> None:
        self._refresh()
        self.admission.pump_all()
        self.h.schedule(self.h.now + HEALTH_EVERY_S, self._health)

    # ----- requests ------------------------------------------------------------------------------

    def submit(self, spec: RequestSpec, at: float, *, client: str | None = None,
               model: str | None = None) -> Outcome:
        out = Outcome(spec, at, client=self.client if client is None else client,
                      model=self.model if model is None else model)
        self.outcomes.append(out)
        self.h.schedule(at, functools.partial(self._arrive, out))
        return out

    def _arrive(self, out: Outcome) -> None:
        self._refresh()
        pol, now, tokens = self.policy, self.h.now, out.spec.prompt_tokens
        if length_limit_refuses(pol, tokens, now, model=out.model, client=lambda: out.client):
            out.rejected = 413
            self.length_limit.refused(now)
            return
        out.role = routed = route(pol, tokens)
        role = self.admission.role_for(routed, tokens)
        if role is None:
            out.rejected = 503
            return
        out.role = role
        seq = self.admission.next_seq()
        u = self.admission.take_now(role, seq)
        if u is not None:
            self._dispatch(out, u)
            return
        try:
            self.admission.enqueue(role, tokens, out, seq)
        except QueueFull:
            out.rejected = 429
        except NoUpstream:
            out.rejected = 503

    # ----- the admission core's I/O --------------------------------------------------------------

    def _dispatch(self, out: Outcome, u: Upstream) -> None:
        out.upstream = u.name
        out.record = self.h.submit(u.name, out.spec, at=self.h.now, on_finish=functools.partial(self._release, u))

    def _fail(self, out: Outcome, exc: Exception) -> None:
        out.rejected = 503

    def _release(self, u: Upstream) -> None:
        self._refresh()
        self.admission.release(u, 0.0)

    def _call_at(self, when: float, fn: Callable[[], None]) -> None:
        def fire() -> None:
            self._refresh()
            fn()

        self.h.schedule(max(when, self.h.now), fire)


def _settled(out: Outcome) -> bool:
    return out.rejected is not None or out.record is not None


def without(policy: Policy, name: str) -> Policy:
    """`policy` with the upstream `name` removed."""
    ups = policy.upstreams.items()
    return replace(policy, upstreams={r: tuple(u for u in specs if u.name != name) for r, specs in ups})
