"""Drift test (#13): a length limit scoped to one client or model refuses only that scope's long prompts, in the
real router and in the efficacy harness's virtual router alike (both decide through router.decide).

The virtual router used to refuse every long prompt whatever the limit's scope, and its actions dropped the
scope the real router actuator sets (params.client / params.model)."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from router_helpers import change, engine, prompt, router

from doctor.config import DoctorConfig
from doctor.remedy.model import ActuatorContext, EngineTarget
from doctor.remedy.router_actuator import RouterActuator
from playbooks.model import Action
from router.policy import Policy, initial_policy
from sim.workload import RequestSpec
from trials import efficacy as eff
from trials.sim_io import SimNetwork

LIMIT, LONG = 100, 500  # a long prompt is over the limit and still under the route threshold (hot)
# (limit's client, limit's model), (request's client, request's model), refused with 413
CASES: list[tuple[tuple[str | None, str | None], tuple[str, str], bool]] = [
    ((None, "model-a"), ("web", "model-a"), True),
    ((None, "model-a"), ("web", "model-b"), False),
    (("batch-job", None), ("batch-job", "model-b"), True),
    (("batch-job", None), ("web", "model-a"), False),
    (("batch-job", "model-a"), ("batch-job", "model-b"), False),
    (("batch-job", "model-a"), ("web", "model-a"), False),
    (("batch-job", "model-a"), ("batch-job", "model-a"), True),
    ((None, None), ("web", "model-b"), True),
]


def test_the_real_router_refuses_only_the_limits_scope() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        for (scope_client, scope_model), (client, model), refused in CASES:
            change(c, length_limit_tokens=LIMIT, length_limit_expires_at=None, length_limit_client=scope_client,
                   length_limit_model=scope_model)
            r = c.post("/v1/completions", json={"model": model, "prompt": prompt(LONG), "max_tokens": 2},
                       headers={"X-Client-Id": client})
            assert (r.status_code == 413) is refused, (scope_client, scope_model, client, model, r.text)


def _virtual() -> tuple[eff.EfficacyHarness, eff.VirtualRouter]:
    h = eff.EfficacyHarness(seed=1)
    net = SimNetwork(h)
    h.add_engine("hot", ["m"], env={"CUDA_VISIBLE_DEVICES": "0"})
    h.add_engine("cold", ["m", "--max-model-len", "32768"], env={"CUDA_VISIBLE_DEVICES": "1"})
    for name in ("hot", "cold"):
        net.register(eff.engine_url(name), name)
    return h, eff.VirtualRouter(h, net, initial_policy([eff.engine_url("hot")], [eff.engine_url("cold")],
                                                       route_threshold_tokens=1000))


@pytest.mark.parametrize(("scope", "request_of", "refused"), CASES)
def test_the_virtual_router_refuses_only_the_limits_scope(scope: tuple[str | None, str | None],
                                                          request_of: tuple[str, str], refused: bool) -> None:
    h, vr = _virtual()
    pol: Policy = replace(vr.policy, length_limit_tokens=LIMIT, length_limit_client=scope[0],
                          length_limit_model=scope[1])
    vr.set_policy(pol)
    out = vr.submit(RequestSpec(0, 0.0, LONG, 4, False), h.now, client=request_of[0], model=request_of[1])
    short = vr.submit(RequestSpec(1, 0.0, LIMIT - 10, 4, False), h.now, client=request_of[0], model=request_of[1])
    h.run_for(60.0)
    assert (out.rejected == 413) is refused, out
    assert short.result == "ok" and (out.result == "ok") is not refused
    assert vr.length_limit.refusals_total == int(refused)


def test_a_scoped_length_limit_action_keeps_its_scope_in_the_virtual_run(tmp_path: Path) -> None:
    """The doctor's own RouterActuator, over the trial's network, sets the scope on the virtual router."""
    h, vr = _virtual()
    transport = vr.net.transport()
    actuator = RouterActuator(client_factory=lambda t: httpx.AsyncClient(transport=transport, timeout=t),
                              clock=lambda: h.now)
    ctx = ActuatorContext(engines={n: EngineTarget(n, n, eff.engine_url(n)) for n in ("hot", "cold")},
                          state_dir=tmp_path, router_url=eff.ROUTER_URL,
                          bounds=dataclasses.asdict(DoctorConfig().bounds))
    asyncio.run(actuator.apply(Action("length_limit", "router",
                                      {"max_tokens": LIMIT, "expires_in_s": 600, "model": "model-a"}), ctx))
    assert (vr.policy.length_limit_tokens, vr.policy.length_limit_model) == (LIMIT, "model-a")
    mine = vr.submit(RequestSpec(0, 0.0, LONG, 4, False), h.now, model="model-a")
    theirs = vr.submit(RequestSpec(1, 0.0, LONG, 4, False), h.now, model="model-b")
    h.run_for(60.0)
    assert mine.rejected == 413 and theirs.result == "ok"
