"""Router actions in an efficacy run: doctor's own RouterActuator, its policy API calls answered in process by the
virtual router (GET and PUT /router/policy with the router's checks), on the harness's virtual clock. Only the
transport and the clock are the harness's; the checks, bounds (the config's), mutations and inverses are the
actuator's."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import httpx

from doctor.config import DoctorConfig
from doctor.remedy.model import ActuatorContext, ActuatorError, EngineTarget, Refused
from doctor.remedy.router_actuator import RouterActuator
from playbooks.model import Action
from router.policy import PolicyError
from trials.efficacy.harness import EfficacyHarness
from trials.efficacy.vrouter import VirtualRouter, engine_url

ROUTER_URL = "http://virtual-router"  # never dialled: the transport below answers in process


def policy_api(router: VirtualRouter) -> httpx.MockTransport:
    """The router's policy API over `router`: GET and PUT /router/policy, errors in the router's shape."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/router/policy":
            return httpx.Response(404, json={"error": {"message": f"no route {request.url.path}"}})
        if request.method == "GET":
            return httpx.Response(200, json=router.policy_document())
        if request.method != "PUT":
            return httpx.Response(405, json={"error": {"message": f"{request.method} is not allowed"}})
        try:
            changes = router.put_policy(json.loads(request.content))
        except PolicyError as exc:
            return httpx.Response(exc.status, json={"error": {"message": str(exc)}})
        return httpx.Response(200, json={"version": router.version, "changes": changes})

    return httpx.MockTransport(handle)


def actuator_context(router: VirtualRouter, h: EfficacyHarness, config: DoctorConfig) -> ActuatorContext:
    """The harness's engines and router as the actuators see them, with the config's bounds."""
    roles = {u.name: role for role, u in router.policy.all_upstreams()}
    engines = {n: EngineTarget(n, roles.get(n), engine_url(n), max_model_len=e.core.config.max_model_len)
               for n, e in h.engines.items()}
    return ActuatorContext(engines=engines, state_dir=Path("efficacy-run-has-no-state-dir"), router_url=ROUTER_URL,
                           bounds=dataclasses.asdict(config.bounds), timeout_s=config.request_timeout_s)


def apply_router_action(router: VirtualRouter, h: EfficacyHarness, a: Action,
                        config: DoctorConfig | None = None) -> Action | None:
    """Apply `a` to the virtual router through doctor's RouterActuator; returns its inverse. Refused when the
    actuator or the router refuses it (nothing changed)."""
    transport = policy_api(router)
    actuator = RouterActuator(client_factory=lambda timeout_s: httpx.AsyncClient(transport=transport,
                                                                                 timeout=timeout_s),
                              clock=lambda: h.now)
    try:
        applied = asyncio.run(actuator.apply(a, actuator_context(router, h, config or DoctorConfig())))
    except ActuatorError as exc:
        raise Refused(f"{a.kind}: {exc}") from None
    return applied.inverse
