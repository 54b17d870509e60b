"""The router actuator: policy changes through the router's authenticated policy API.

Every change is GET /router/policy, a modified copy, PUT with the `version` read (optimistic concurrency;
one retry on 409). The Applied inverse restores exactly the previous values. The bearer token is only
ever put in the Authorization header: never in a message, a step or an error.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from doctor.remedy.model import ActuatorContext, ActuatorError, Applied, Refused
from playbooks.action_kinds import kinds
from playbooks.model import Action

ROUTER_KINDS: tuple[str, ...] = kinds(actuator="router")
PER_UPSTREAM_KINDS: tuple[str, ...] = kinds(actuator="router", per_upstream=True)  # about one upstream (params.engine)
DEFAULT_LENGTH_LIMIT_EXPIRY_S = 3600
ROUTER_BATCH_TIMEOUT_MAX_MS = 1000  # what the router itself accepts (inverses restore within this)
FAIRNESS_MAX = 10_000
STATES = ("active", "draining", "stopped")
ClientFactory = Callable[[float], httpx.AsyncClient]
Mutation = Callable[[dict[str, Any]], None]


def _default_client(timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout_s)


def _int_param(params: Mapping[str, Any], key: str, *, allow_none: bool = False) -> int | None:
    value = params.get(key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise Refused(f"params.{key}: expected an integer, got {value!r}")
    return int(value)


def _engine_of(action: Action) -> str | None:
    """The engine a router action is about: params.engine, else the target when it names an engine."""
    name = action.params.get("engine")
    if name is None and action.target != "router":
        name = action.target
    return None if name is None else str(name)


class RouterPolicyClient:
    """GET/PUT of the policy document with the bearer token; errors become ActuatorError without the token."""

    def __init__(self, url: str, token: str | None, *, timeout_s: float = 10.0,
                 client_factory: ClientFactory = _default_client) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s
        self._client_factory = client_factory

    def __repr__(self) -> str:  # never show the token
        return f"RouterPolicyClient({self.url!r})"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _fail(self, what: str, resp: httpx.Response) -> ActuatorError:
        try:
            detail = str(resp.json()["error"]["message"])
        except (ValueError, KeyError, TypeError):
            detail = resp.text[:200]
        if resp.status_code in (401, 403):
            why = "no token is configured for it" if not self._token else "it refused the configured token"
            return ActuatorError(f"the router's policy API at {self.url} denied {what} (HTTP {resp.status_code}: "
                                 f"{why}; router says: {detail}); nothing was changed")
        return ActuatorError(f"the router at {self.url} refused {what} (HTTP {resp.status_code}: {detail})")

    async def _request(self, method: str, what: str, body: Any = None) -> httpx.Response:
        try:
            async with self._client_factory(self.timeout_s) as client:
                return await client.request(method, self.url + "/router/policy", json=body, headers=self._headers())
        except httpx.HTTPError as exc:
            raise ActuatorError(f"the router at {self.url} could not be reached for {what}: "
                                f"{type(exc).__name__}") from None

    async def get(self) -> dict[str, Any]:
        resp = await self._request("GET", "reading the policy")
        if resp.status_code != 200:
            raise self._fail("reading the policy", resp)
        return dict(resp.json())

    async def update(self, mutate: Mutation, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """GET, mutate a copy, PUT with the version read; retry once on a version conflict.

        Returns (the document before, the document PUT). `mutate` may raise Refused: nothing is sent.
        """
        for attempt in (1, 2):
            before = await self.get()
            doc = copy.deepcopy(before)
            doc.pop("status", None)
            doc.pop("updated_at", None)
            mutate(doc)
            resp = await self._request("PUT", what, doc)
            if resp.status_code == 200:
                return before, doc
            if resp.status_code == 409 and attempt == 1:
                continue
            raise self._fail(what, resp)
        raise AssertionError("unreachable")


def find_upstream(doc: Mapping[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    """(role, upstream entry) of upstream `name`; Refused when the router has none by that name."""
    for role, items in (doc.get("upstreams") or {}).items():
        for item in items:
            if item.get("name") == name:
                return role, item
    names = sorted(u.get("name", "?") for items in (doc.get("upstreams") or {}).values() for u in items)
    raise Refused(f"the router has no upstream named {name!r} (upstreams: {', '.join(names) or 'none'})")


class RouterActuator:
    """Applies the router kinds; also the drain/resume/add/swap helpers the engine actuators use."""

    kinds: tuple[str, ...] = ROUTER_KINDS

    def __init__(self, *, client_factory: ClientFactory = _default_client, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.client_factory = client_factory
        self.clock = clock
        self.sleep = sleep

    def policy_client(self, ctx: ActuatorContext) -> RouterPolicyClient:
        if not ctx.router_url:
            raise Refused("no router is configured ([router] url in the config)")
        return RouterPolicyClient(ctx.router_url, ctx.router_token, timeout_s=ctx.timeout_s,
                                  client_factory=self.client_factory)

    # ----- check ---------------------------------------------------------------------------------

    def check(self, action: Action, ctx: ActuatorContext) -> None:
        if action.kind not in self.kinds:
            raise Refused(f"{action.kind!r} is not a router action (router actions: {', '.join(self.kinds)})")
        if not ctx.router_url:
            raise Refused("no router is configured ([router] url in the config)")
        p, restore = action.params, bool(action.params.get("restore"))
        if action.kind in PER_UPSTREAM_KINDS:
            engine = _engine_of(action)
            if engine is None:
                raise Refused(f"{action.kind} needs params.engine (the upstream's name)")
            if engine not in ctx.engines and not restore:
                raise Refused(f"unknown engine {engine!r} (configured: {', '.join(sorted(ctx.engines)) or 'none'})")
        if action.kind == "set_batch_timeout":
            ms = _int_param(p, "batch_timeout_ms")
            assert ms is not None
            lo, hi = int(ctx.bounds.get("batch_timeout_min_ms", 50)), int(ctx.bounds.get("batch_timeout_max_ms", 200))
            if restore:
                lo, hi = 0, ROUTER_BATCH_TIMEOUT_MAX_MS
            if not lo <= ms <= hi:
                raise Refused(f"batch_timeout_ms {ms} is outside the bounds {lo}..{hi} ms")
        elif action.kind == "set_max_in_flight":
            n = _int_param(p, "max_in_flight")
            if n is None or n < 1:
                raise Refused(f"max_in_flight must be >= 1, got {n}")
        elif action.kind == "length_limit":
            self._check_length_limit(p, ctx, restore)
        elif action.kind == "set_route_threshold":
            n = _int_param(p, "threshold_tokens")
            assert n is not None
            hot = [e.max_model_len for e in ctx.engines.values() if e.role == "hot" and e.max_model_len]
            if n < 1 or (hot and n > min(hot)):
                raise Refused(f"threshold_tokens {n} must be within 1..{min(hot) if hot else 'max'} "
                              "(the hot engines' max_model_len)")
        elif action.kind == "set_fairness_window":
            n = _int_param(p, "window" if "window" in p else "fairness_window")
            assert n is not None
            if not 0 <= n <= FAIRNESS_MAX:
                raise Refused(f"fairness window {n} is outside 0..{FAIRNESS_MAX}")
        elif action.kind == "stop_routing":
            state = self._target_state(p)
            if state not in STATES:
                raise Refused(f"params.state {state!r} is not one of {', '.join(STATES)}")

    def _check_length_limit(self, p: Mapping[str, Any], ctx: ActuatorContext, restore: bool) -> None:
        tokens = _int_param(p, "max_tokens", allow_none=True)
        if tokens is None:
            return  # lifting the limit
        cap = ctx.bounds.get("length_limit_max_tokens")
        lens = [e.max_model_len for e in ctx.engines.values() if e.max_model_len]
        cap = int(cap) if cap else (max(lens) if lens else None)
        if tokens < 1 or (cap is not None and tokens > cap):
            raise Refused(f"length limit {tokens} tokens is outside 1..{cap} (the engines' max_model_len)")
        if restore and "expires_at" in p:
            return
        expiry = p.get("expires_in_s", DEFAULT_LENGTH_LIMIT_EXPIRY_S)
        if isinstance(expiry, bool) or not isinstance(expiry, int | float) or expiry <= 0:
            raise Refused(f"a length limit needs a positive expiry (params.expires_in_s), got {expiry!r}: an "
                          "emergency limit must not outlive the incident")

    @staticmethod
    def _target_state(p: Mapping[str, Any]) -> str:
        if p.get("resume"):
            return "active"
        return str(p.get("state", "draining"))

    # ----- apply ---------------------------------------------------------------------------------

    async def apply(self, action: Action, ctx: ActuatorContext) -> Applied:
        self.check(action, ctx)
        client = self.policy_client(ctx)
        p = action.params
        now = self.clock()
        prev: dict[str, Any] = {}

        def mutate(doc: dict[str, Any]) -> None:
            prev.clear()
            if action.kind == "set_batch_timeout":
                prev["batch_timeout_ms"] = doc["batch_timeout_ms"]
                doc["batch_timeout_ms"] = int(p["batch_timeout_ms"])
            elif action.kind == "set_route_threshold":
                prev["threshold_tokens"] = doc["route_threshold_tokens"]
                doc["route_threshold_tokens"] = int(p["threshold_tokens"])
            elif action.kind == "set_fairness_window":
                prev["window"] = doc["fairness_window"]
                doc["fairness_window"] = int(p.get("window", p.get("fairness_window", 0)))
            elif action.kind == "length_limit":
                prev["max_tokens"] = doc.get("length_limit_tokens")
                prev["expires_at"] = doc.get("length_limit_expires_at")
                self._set_length_limit(doc, p, now)
            elif action.kind in PER_UPSTREAM_KINDS:
                engine = _engine_of(action)
                assert engine is not None
                _, up = find_upstream(doc, engine)
                if action.kind == "set_max_in_flight":
                    prev["max_in_flight"] = up["max_in_flight"]
                    up["max_in_flight"] = int(p["max_in_flight"])
                else:
                    prev["state"] = up["state"]
                    up["state"] = self._target_state(p)

        before, after = await client.update(mutate, f"{action.kind} on the policy")
        engine = _engine_of(action)
        inv_params: dict[str, Any] = {**prev, "restore": True}
        if engine is not None and action.kind in ("set_max_in_flight", "stop_routing", "set_batch_timeout"):
            inv_params["engine"] = engine
        if action.kind == "length_limit" and prev["max_tokens"] is None:
            inv_params = {"max_tokens": None, "restore": True}
        changed = {k: after[k] for k in after if k != "upstreams" and after[k] != before.get(k)}
        steps = (f"router policy v{before.get('version')}: {action.kind} "
                 f"{ {k: v for k, v in p.items() if k != 'restore'} } (was {prev})",)
        return Applied(Action(action.kind, "router", inv_params, risk="low",
                              description=f"restore the router's previous {action.kind} values"),
                       steps, changed)

    def _set_length_limit(self, doc: dict[str, Any], p: Mapping[str, Any], now: float) -> None:
        expected = p.get("if_tokens")
        if "if_tokens" in p and doc.get("length_limit_tokens") != expected:
            raise Refused(f"the router's length limit is now {doc.get('length_limit_tokens')}, not {expected}: "
                          "changed by someone else since; left as it is")
        tokens = p.get("max_tokens")
        if tokens is None:
            doc["length_limit_tokens"] = None
            doc["length_limit_expires_at"] = None
            return
        doc["length_limit_tokens"] = int(tokens)
        if p.get("restore") and "expires_at" in p:
            expires = p["expires_at"]
            if expires is None or float(expires) <= now:  # the old limit had no expiry or is already over
                doc["length_limit_tokens"] = None if expires is not None else int(tokens)
                doc["length_limit_expires_at"] = None
            else:
                doc["length_limit_expires_at"] = float(expires)
        else:
            doc["length_limit_expires_at"] = now + float(p.get("expires_in_s", DEFAULT_LENGTH_LIMIT_EXPIRY_S))
        for key in ("client", "model"):
            if key in p:
                doc[f"length_limit_{key}"] = p[key]

    # ----- helpers for the engine actuators --------------------------------------------------------

    async def set_state(self, ctx: ActuatorContext, engine: str, state: str) -> str:
        """Set one upstream's state; returns the previous one."""
        prev: list[str] = []

        def mutate(doc: dict[str, Any]) -> None:
            _, up = find_upstream(doc, engine)
            prev[:] = [str(up["state"])]
            up["state"] = state

        await self.policy_client(ctx).update(mutate, f"setting upstream {engine} {state}")
        return prev[0]

    async def drain(self, ctx: ActuatorContext, engine: str) -> str:
        """No new requests to `engine` (in-flight ones finish); returns its previous state."""
        return await self.set_state(ctx, engine, "draining")

    async def resume(self, ctx: ActuatorContext, engine: str, state: str = "active") -> None:
        await self.set_state(ctx, engine, state)

    async def upstream(self, ctx: ActuatorContext, engine: str) -> tuple[str, dict[str, Any]]:
        """(role, entry) of `engine` in the current policy, with the router's status fields merged in."""
        doc = await self.policy_client(ctx).get()
        role, up = find_upstream(doc, engine)
        status = ((doc.get("status") or {}).get("upstreams") or {}).get(engine) or {}
        return role, {**status, **up}

    async def in_flight(self, ctx: ActuatorContext, engine: str) -> int:
        _, up = await self.upstream(ctx, engine)
        return int(up.get("in_flight") or 0)

    async def wait_idle(self, ctx: ActuatorContext, engine: str, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Wait (bounded) until the router has no request in flight on `engine`."""
        deadline = time.monotonic() + timeout_s
        while await self.in_flight(ctx, engine) > 0:
            if time.monotonic() > deadline:
                return False
            await self.sleep(poll_s)
        return True

    async def add_upstream(self, ctx: ActuatorContext, role: str, name: str, url: str, *, state: str = "active",
                           max_in_flight: int | None = None) -> None:
        def mutate(doc: dict[str, Any]) -> None:
            ups = doc.setdefault("upstreams", {})
            if any(u.get("name") == name for items in ups.values() for u in items):
                raise Refused(f"the router already has an upstream named {name!r}")
            entry: dict[str, Any] = {"name": name, "url": url.rstrip("/"), "state": state}
            if max_in_flight is not None:
                entry["max_in_flight"] = max_in_flight
            ups.setdefault(role, []).append(entry)

        await self.policy_client(ctx).update(mutate, f"adding upstream {name} ({role})")

    async def remove_upstream(self, ctx: ActuatorContext, name: str) -> dict[str, Any]:
        """Remove an upstream (its in-flight requests still finish); returns its entry."""
        removed: list[dict[str, Any]] = []

        def mutate(doc: dict[str, Any]) -> None:
            role, up = find_upstream(doc, name)
            doc["upstreams"][role] = [u for u in doc["upstreams"][role] if u.get("name") != name]
            removed[:] = [dict(up, role=role)]

        await self.policy_client(ctx).update(mutate, f"removing upstream {name}")
        return removed[0]

    async def swap_upstream(self, ctx: ActuatorContext, old_name: str, new_name: str, new_url: str) -> dict[str, Any]:
        """Replace upstream `old_name` by `new_name` at `new_url` in one change (same role, place, state, cap).

        The router keeps the old one's in-flight requests until they finish. Returns the old entry.
        """
        old: list[dict[str, Any]] = []

        def mutate(doc: dict[str, Any]) -> None:
            role, up = find_upstream(doc, old_name)
            old[:] = [dict(up)]
            if new_name != old_name and any(u.get("name") == new_name for items in doc["upstreams"].values()
                                            for u in items):
                raise Refused(f"the router already has an upstream named {new_name!r}")
            doc["upstreams"][role] = [
                {**u, "name": new_name, "url": new_url.rstrip("/")} if u.get("name") == old_name
                else u for u in doc["upstreams"][role]]

        await self.policy_client(ctx).update(mutate, f"swapping upstream {old_name} for {new_name}")
        return old[0]
