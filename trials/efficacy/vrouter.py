"""The virtual router: the real router's decisions (router.decide, router.release, router.upstreams,
router.length_limit) and metrics (router.metrics) on the harness's virtual clock, served on the trial's network
at ROUTER_URL (GET and PUT /router/policy with the router's checks, GET /metrics, GET /health). Only the I/O is
the harness's: time, timers, health (an engine answers at the upstream's URL, alive and started) and dispatch (a
request submitted to the sim engine at that URL)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx

from router.decide import length_limit_refuses, route
from router.length_limit import LengthLimitTracker
from router.metrics import RouterMetrics
from router.policy import ROLES, Policy, PolicyError, UpstreamSpec, check_limits, diff, parse_versioned
from router.release import AdmissionCore, AdmissionIo, NoUpstream, QueueFull
from router.upstreams import Upstream, UpstreamSet
from sim.workload import RequestSpec
from trials.efficacy.harness import EfficacyHarness, Outcome
from trials.sim_io import SimNetwork

HEALTH_EVERY_S = 2.0  # the router's health loop
ROUTER_URL = "http://router.sim:8080"


class VirtualRouter:
    """The router's admission, routing and length limit over the harness's sim engines, in virtual time."""

    def __init__(self, h: EfficacyHarness, net: SimNetwork, policy: Policy, *, model: str | None = None,
                 client: str = "") -> None:
        self.h, self.net = h, net
        self.policy = policy
        self.model, self.client = model, client  # what a request carries unless submit says otherwise
        self.metrics = RouterMetrics()
        self.outcomes: list[Outcome] = []
        self.changes: list[tuple[float, str]] = []  # (virtual time, policy diff line)
        self.version = 1  # of the policy document, as the router's policy API counts it
        self.upstreams = UpstreamSet()
        self.length_limit = LengthLimitTracker(h.now)  # router_length_limit_idle_seconds, as router/app.py keeps it
        io: AdmissionIo[Outcome] = AdmissionIo(lambda: self.h.now, self._call_at, self._dispatch, self._fail,
                                               _settled)
        self.admission = AdmissionCore(self.upstreams.pools, lambda: self.policy, io, on_release=self._on_release)
        self.upstreams.sync(policy)
        h.schedule(h.now + HEALTH_EVERY_S, self._health)
        net.serve(ROUTER_URL, self.handle)

    # ----- HTTP ----------------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        """The router's policy API, /metrics and /health (errors in the router's shape)."""
        path, method = request.url.path, request.method
        if path == "/metrics" and method == "GET":
            self._refresh()
            self.metrics.refresh(policy=self.policy, version=self.version, queue_length=self.admission.queue_length,
                                 upstreams=[*self.upstreams.all(), *self.upstreams.detached],
                                 length_limit=self.length_limit, now=self.h.now)
            return httpx.Response(200, content=self.metrics.render(),
                                  headers={"content-type": "text/plain; version=0.0.4; charset=utf-8"})
        if path == "/health" and method == "GET":
            return httpx.Response(200, json={"status": "ok"})
        if path != "/router/policy":
            return httpx.Response(404, json={"error": {"message": f"no route {path}"}})
        if method == "GET":
            return httpx.Response(200, json=self.policy_document())
        if method != "PUT":
            return httpx.Response(405, json={"error": {"message": f"{method} is not allowed"}})
        try:
            changes = self.put_policy(json.loads(request.content))
        except PolicyError as exc:
            return httpx.Response(exc.status, json={"error": {"message": str(exc)}})
        except ValueError as exc:
            return httpx.Response(400, json={"error": {"message": f"not JSON: {exc}"}})
        return httpx.Response(200, json={"version": self.version, "changes": changes})

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
        lengths = {}
        for _, u in new.all_upstreams():
            key = self.net.engine_at(u.url)
            if key is not None and key in self.h.engines:
                lengths[u.name] = self.h.engines[key].core.config.max_model_len
        check_limits(new, lengths, now=self.h.now, previous=self.policy)
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

    def engine_of(self, u: Upstream) -> str | None:
        """The harness key of the engine at the upstream's URL (None: nothing listens there)."""
        key = self.net.engine_at(u.url)
        return key if key is not None and key in self.h.engines else None

    def healthy(self, u: Upstream) -> bool:
        key = self.engine_of(u)
        return key is not None and not self.h.engines[key].core.dead and not self.h.shut_down(key)

    def _refresh(self) -> None:
        """Health and max_model_len as the router's probes would find them (read live from the sim)."""
        for u in self.upstreams.all():
            u.healthy = self.healthy(u)
            key = self.engine_of(u)
            u.max_model_len = self.h.engines[key].core.config.max_model_len if key else u.max_model_len

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
            self.metrics.reject("length_limit")
            return
        out.role = routed = route(pol, tokens)
        role = self.admission.role_for(routed, tokens)
        if role is None:
            out.rejected = 503
            self.metrics.reject("no_upstream")
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
            self.metrics.reject("queue_full")
        except NoUpstream:
            out.rejected = 503
            self.metrics.reject("no_upstream")

    # ----- the admission core's I/O --------------------------------------------------------------

    def _dispatch(self, out: Outcome, u: Upstream) -> None:
        out.upstream = u.name
        key = self.engine_of(u)
        if key is None:  # nothing listens at the upstream's URL: the proxy's connect error
            out.rejected = 503
            self.metrics.reject("upstream_error")
            self.h.schedule(self.h.now, functools.partial(self._release, u))
            return
        out.engine = key
        out.record = self.h.submit(key, out.spec, at=self.h.now, on_finish=functools.partial(self._release, u))

    def _fail(self, out: Outcome, exc: Exception) -> None:
        out.rejected = 503
        self.metrics.reject("no_upstream")

    def _on_release(self, role: str, waited: float) -> None:
        self.metrics.child(self.metrics.queue_time, role).observe(waited)  # type: ignore[attr-defined]

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
