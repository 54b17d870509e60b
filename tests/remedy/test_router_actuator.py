"""RouterActuator against the real router (policy API on loopback) with two sim engines behind it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from doctor.remedy.model import ActuatorContext, ActuatorError, Applied, EngineTarget, Refused
from doctor.remedy.router_actuator import RouterActuator
from playbooks.model import Action
from router.config import RouterConfig
from router.server import RouterThread, router_thread
from sim.engine_cli import EngineThread
from sim.testing import ALL_GRAPHED, engine_thread

TOKEN = "s3cret-router-token-xyz"
FAST = [*ALL_GRAPHED, "--time-scale", "0.1"]


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[EngineThread, EngineThread, RouterThread]]:
    with engine_thread(["m", *FAST, "--served-model-name", "hot"]) as hot, \
            engine_thread(["m", *FAST, "--served-model-name", "cold"]) as cold:
        cfg = RouterConfig(hot=[hot.url], cold=[cold.url], port=0, policy_file="", health_interval_s=0.2,
                           route_threshold_tokens=1000)
        with router_thread(cfg, token=TOKEN) as rt:
            yield hot, cold, rt


def make_ctx(stack: tuple[EngineThread, EngineThread, RouterThread], tmp_path: Path, *,
             token: str | None = TOKEN, **bounds: Any) -> ActuatorContext:
    hot, cold, rt = stack
    engines = {"hot": EngineTarget("hot", "hot", hot.url, max_model_len=4096),
               "cold": EngineTarget("cold", "cold", cold.url, max_model_len=4096)}
    return ActuatorContext(engines=engines, state_dir=tmp_path, router_url=rt.url, router_token=token,
                           bounds=bounds)


def policy(rt: RouterThread) -> dict[str, Any]:
    doc = httpx.get(rt.url + "/router/policy", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    for key in ("status", "updated_at", "version"):
        doc.pop(key)
    return dict(doc)


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    out = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if k != "upstreams" and a.get(k) != b.get(k)}
    ua = {u["name"]: u for items in a["upstreams"].values() for u in items}
    ub = {u["name"]: u for items in b["upstreams"].values() for u in items}
    for name in set(ua) | set(ub):
        if ua.get(name) != ub.get(name):
            out["upstream:" + name] = (ua.get(name), ub.get(name))
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def assert_no_token(*texts: object) -> None:
    for text in texts:
        assert TOKEN not in repr(text)


@pytest.mark.parametrize(("action", "expected"), [
    (Action("set_batch_timeout", "router", {"engine": "hot", "batch_timeout_ms": 120}), {"batch_timeout_ms"}),
    (Action("set_max_in_flight", "router", {"engine": "cold", "max_in_flight": 3}), {"upstream:cold"}),
    (Action("set_max_in_flight", "hot", {"max_in_flight": 7}), {"upstream:hot"}),  # kv_pressure's shape
    (Action("set_route_threshold", "router", {"threshold_tokens": 2048}), {"route_threshold_tokens"}),
    (Action("set_fairness_window", "router", {"window": 3}), {"fairness_window"}),
    (Action("stop_routing", "router", {"engine": "cold"}), {"upstream:cold"}),
    (Action("length_limit", "router", {"max_tokens": 3000, "expires_in_s": 600}),
     {"length_limit_tokens", "length_limit_expires_at"}),
])
def test_each_action_changes_only_its_field_and_the_inverse_restores(
        stack: tuple[EngineThread, EngineThread, RouterThread], tmp_path: Path, action: Action,
        expected: set[str]) -> None:
    rt = stack[2]
    ctx = make_ctx(stack, tmp_path)
    act = RouterActuator()
    before = policy(rt)
    act.check(action, ctx)
    applied: Applied = run(act.apply(action, ctx))
    after = policy(rt)
    assert set(diff(before, after)) == expected
    assert applied.inverse is not None and applied.inverse.target == "router"
    assert_no_token(applied)
    act.check(applied.inverse, ctx)
    run(act.apply(applied.inverse, ctx))
    assert diff(before, policy(rt)) == {}


def test_values_land_where_they_should(stack: tuple[EngineThread, EngineThread, RouterThread],
                                       tmp_path: Path) -> None:
    rt = stack[2]
    ctx = make_ctx(stack, tmp_path)
    act = RouterActuator()
    t0 = time.time()
    inv = run(act.apply(Action("length_limit", "router", {"max_tokens": 2500}), ctx)).inverse
    doc = policy(rt)
    assert doc["length_limit_tokens"] == 2500
    assert t0 + 3600 - 5 <= doc["length_limit_expires_at"] <= time.time() + 3600  # default: one hour
    assert inv.params == {"max_tokens": None, "restore": True}
    # a second limit over the first: its inverse restores the first limit with its own expiry
    first_expiry = doc["length_limit_expires_at"]
    inv2 = run(act.apply(Action("length_limit", "router", {"max_tokens": 1500, "expires_in_s": 60}), ctx)).inverse
    run(act.apply(inv2, ctx))
    doc = policy(rt)
    assert (doc["length_limit_tokens"], doc["length_limit_expires_at"]) == (2500, first_expiry)
    run(act.apply(inv, ctx))
    assert policy(rt)["length_limit_tokens"] is None
    # the stop_routing inverse restores the previous state, and the playbooks' resume shape works too
    run(act.apply(Action("stop_routing", "router", {"engine": "cold", "state": "stopped"}), ctx))
    assert policy(rt)["upstreams"]["cold"][0]["state"] == "stopped"
    run(act.apply(Action("stop_routing", "router", {"engine": "cold", "resume": True}), ctx))
    assert policy(rt)["upstreams"]["cold"][0]["state"] == "active"


@pytest.mark.parametrize(("action", "why"), [
    (Action("set_batch_timeout", "router", {"engine": "hot", "batch_timeout_ms": 30}), "outside the bounds 50..200"),
    (Action("set_batch_timeout", "router", {"engine": "hot", "batch_timeout_ms": 250}), "outside the bounds"),
    (Action("length_limit", "router", {"max_tokens": 2000, "expires_in_s": 0}), "positive expiry"),
    (Action("length_limit", "router", {"max_tokens": 2000, "expires_in_s": None}), "positive expiry"),
    (Action("length_limit", "router", {"max_tokens": 9000}), "max_model_len"),
    (Action("set_route_threshold", "router", {"threshold_tokens": 5000}), "max_model_len"),
    (Action("set_max_in_flight", "router", {"engine": "nope", "max_in_flight": 4}), "unknown engine 'nope'"),
    (Action("stop_routing", "router", {"engine": "nope"}), "unknown engine"),
    (Action("set_max_in_flight", "router", {"engine": "hot", "max_in_flight": 0}), "must be >= 1"),
    (Action("set_fairness_window", "router", {"window": "x"}), "expected an integer"),
])
def test_out_of_bounds_and_unknown_engines_are_refused_and_change_nothing(
        stack: tuple[EngineThread, EngineThread, RouterThread], tmp_path: Path, action: Action, why: str) -> None:
    rt = stack[2]
    ctx = make_ctx(stack, tmp_path)
    before = policy(rt)
    with pytest.raises(Refused, match=why):
        RouterActuator().check(action, ctx)
    with pytest.raises(Refused, match=why):
        run(RouterActuator().apply(action, ctx))
    assert diff(before, policy(rt)) == {}


def test_bounds_come_from_the_config(stack: tuple[EngineThread, EngineThread, RouterThread], tmp_path: Path) -> None:
    ctx = make_ctx(stack, tmp_path, batch_timeout_min_ms=10, batch_timeout_max_ms=40)
    RouterActuator().check(Action("set_batch_timeout", "router", {"batch_timeout_ms": 30}), ctx)
    with pytest.raises(Refused, match=r"10\.\.40"):
        RouterActuator().check(Action("set_batch_timeout", "router", {"batch_timeout_ms": 100}), ctx)


def test_an_upstream_the_router_does_not_have_is_refused(stack: tuple[EngineThread, EngineThread, RouterThread],
                                                         tmp_path: Path) -> None:
    ctx = make_ctx(stack, tmp_path)
    ctx.engines["ghost"] = EngineTarget("ghost", "hot", "http://127.0.0.1:9")  # type: ignore[index]
    with pytest.raises(Refused, match="no upstream named 'ghost'"):
        run(RouterActuator().apply(Action("stop_routing", "router", {"engine": "ghost"}), ctx))


@pytest.mark.parametrize("token", ["wrong-token", None])
def test_a_router_that_refuses_the_token(stack: tuple[EngineThread, EngineThread, RouterThread], tmp_path: Path,
                                         token: str | None) -> None:
    rt = stack[2]
    ctx = make_ctx(stack, tmp_path, token=token)
    before = policy(rt)
    with pytest.raises(ActuatorError, match=r"denied.*HTTP 401.*nothing was changed") as err:
        run(RouterActuator().apply(Action("set_batch_timeout", "router", {"batch_timeout_ms": 100}), ctx))
    assert "wrong-token" not in str(err.value)
    assert diff(before, policy(rt)) == {}


def test_a_router_without_a_policy_token_says_so(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST]) as eng:
        cfg = RouterConfig(hot=[eng.url], cold=[], port=0, policy_file="", token_env="NO_SUCH_TOKEN_ENV_VAR")
        with router_thread(cfg, token="") as rt:
            ctx = ActuatorContext(engines={"hot": EngineTarget("hot", "hot", eng.url)}, state_dir=tmp_path,
                                  router_url=rt.url, router_token=TOKEN)
            with pytest.raises(ActuatorError, match="HTTP 403") as err:
                run(RouterActuator().apply(Action("set_fairness_window", "router", {"window": 2}), ctx))
            assert_no_token(err.value)


def test_a_version_conflict_is_retried_once(stack: tuple[EngineThread, EngineThread, RouterThread],
                                            tmp_path: Path) -> None:
    """Someone else changes the policy between our GET and PUT: 409, then GET again and re-apply."""
    rt = stack[2]
    ctx = make_ctx(stack, tmp_path)
    before = policy(rt)
    puts: list[int] = []

    async def meddle(request: httpx.Request) -> None:
        if request.method == "PUT":
            puts.append(1)
            if len(puts) == 1:  # a concurrent writer wins the race
                other = {**policy(rt), "max_queue": 77}
                assert httpx.put(rt.url + "/router/policy", json=other,
                                 headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200

    def factory(timeout: float) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout, event_hooks={"request": [meddle]})

    run(RouterActuator(client_factory=factory).apply(
        Action("set_batch_timeout", "router", {"batch_timeout_ms": 90}), ctx))
    after = policy(rt)
    assert len(puts) == 2
    assert (after["batch_timeout_ms"], after["max_queue"]) == (90, 77)  # both changes kept
    httpx.put(rt.url + "/router/policy", json=before, headers={"Authorization": f"Bearer {TOKEN}"})


def test_helpers_drain_resume_add_swap(stack: tuple[EngineThread, EngineThread, RouterThread],
                                       tmp_path: Path) -> None:
    hot, cold, rt = stack
    ctx = make_ctx(stack, tmp_path)
    act = RouterActuator()
    before = policy(rt)

    async def scenario() -> None:
        assert await act.drain(ctx, "hot") == "active"
        assert (await act.upstream(ctx, "hot"))[1]["state"] == "draining"
        assert await act.wait_idle(ctx, "hot", 5.0)
        await act.resume(ctx, "hot")
        await act.add_upstream(ctx, "cold", "cold-2", hot.url, max_in_flight=5)
        with pytest.raises(Refused, match="already has"):
            await act.add_upstream(ctx, "cold", "cold-2", hot.url)
        old = await act.swap_upstream(ctx, "cold-2", "cold-3", cold.url)
        assert old["url"] == hot.url
        role, entry = await act.upstream(ctx, "cold-3")
        assert (role, entry["url"], entry["max_in_flight"], entry["state"]) == ("cold", cold.url, 5, "active")
        await act.remove_upstream(ctx, "cold-3")

    run(scenario())
    assert diff(before, policy(rt)) == {}


def test_a_conditional_lift_leaves_a_limit_someone_else_changed(
        stack: tuple[EngineThread, EngineThread, RouterThread], tmp_path: Path) -> None:
    _, _, rt = stack
    ctx = make_ctx(stack, tmp_path)
    act = RouterActuator()
    run(act.apply(Action("length_limit", "router", {"max_tokens": 3000, "expires_in_s": 600}), ctx))
    lift = Action("length_limit", "router", {"max_tokens": None, "if_tokens": 2000})
    before = policy(rt)
    with pytest.raises(Refused, match="now 3000, not 2000"):
        run(act.apply(lift, ctx))
    assert policy(rt) == before
    run(act.apply(Action("length_limit", "router", {"max_tokens": None, "if_tokens": 3000}), ctx))
    assert policy(rt)["length_limit_tokens"] is None
