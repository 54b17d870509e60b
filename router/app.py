"""The router: upstream pools kept in sync with the policy, health checks, the policy API, /health, /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from router.admission import Admission
from router.config import RouterConfig
from router.lean import Begun
from router.length_limit import LengthLimitTracker
from router.metrics import RouterMetrics
from router.policy import ROLES, Policy, PolicyError, check_limits, initial_policy, load_document, parse_versioned
from router.proxy import PROXY_PATHS, Proxy
from router.secrets import bearer_matches, load_token
from router.store import PolicyStore
from router.tokens import EngineCounter, EstimateCounter, LocalTokenizerCounter, TokenCounter
from router.upstreams import Upstream, UpstreamSet
from router.wire import WireClient

log = logging.getLogger("router")
POLICY_BODY_MAX = 1024 * 1024


def read_token(config: RouterConfig, env: dict[str, str] | None = None) -> str | None:
    """The policy API's bearer token: the token file when set (its permissions checked), else the environment
    variable; None = API off. SecretFileError (a ValueError) names the file and what is wrong."""
    return load_token(config.token_file or None, config.token_env, env)


def _error(status: int, message: str, err_type: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": err_type, "code": status}}, status_code=status,
                        headers=headers)


class Router:
    """One router instance: an ASGI app (`router`) plus its background health checks (start/close)."""

    def __init__(self, config: RouterConfig, *, clock: Callable[[], float] = time.time, token: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.metrics = RouterMetrics()
        limits = httpx.Limits(max_connections=4096, max_keepalive_connections=512, keepalive_expiry=30.0)
        # TCP_NODELAY: httpx writes request headers and body separately; with Nagle on, the body waits for the
        # engine's delayed ACK (~40 ms per request on Linux).
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(config.upstream_timeout_s, connect=config.connect_timeout_s),
            transport=httpx.AsyncHTTPTransport(limits=limits, socket_options=nodelay))
        self.health_client = httpx.AsyncClient(timeout=httpx.Timeout(config.health_timeout_s))
        self.wire = WireClient(connect_timeout_s=config.connect_timeout_s, read_timeout_s=config.upstream_timeout_s)
        initial = initial_policy(config.hot, config.cold, route_threshold_tokens=config.route_threshold_tokens,
                                 batch_timeout_ms=config.batch_timeout_ms, fairness_window=config.fairness_window,
                                 max_queue=config.max_queue, max_in_flight=config.max_in_flight)
        path = Path(config.policy_file) if config.policy_file else None
        self.store = PolicyStore(initial, path, clock=clock, history_keep=config.history_keep)
        self.load_warning = self.store.load()
        if self.store.loaded_from_file and (config.hot or config.cold):
            log.info("upstreams come from the restored policy file; --hot/--cold are used only without one")
        self.token = token if token is not None else read_token(config, env)
        self.upstreams = UpstreamSet()
        self.pools = self.upstreams.pools
        self.upstreams.sync(self.store.policy)
        self.admission = Admission(self.pools, lambda: self.store.policy, on_release=self._on_release)
        self.estimate = EstimateCounter(config.chars_per_token)
        self.counter: TokenCounter = self._build_counter()
        self.metrics.token_method.labels(self.counter.method).set(1)
        self.proxy = Proxy(self)
        self._policy_lock = asyncio.Lock()
        self.length_limit = LengthLimitTracker(clock())  # router_length_limit_idle_seconds
        self._health_task: asyncio.Task[None] | None = None
        self.app = Starlette(routes=[
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics_endpoint, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/router/policy", self.get_policy, methods=["GET"]),
            Route("/router/policy", self.put_policy, methods=["PUT"]),
            Route("/router/policy/history", self.policy_history, methods=["GET"]),
        ])

    # ----- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in PROXY_PATHS and scope["method"] == "POST":
            await self.proxy(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def begin(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> Begun:
        """A proxied request taken as far as the engine at once, the rest to run as its task or answered from
        callbacks (Proxy.begin); None: serve it through __call__."""
        if scope["path"] in PROXY_PATHS and scope["method"] == "POST":
            return self.proxy.begin(scope, body, receive, send)
        return None

    def _build_counter(self) -> TokenCounter:
        method = self.config.token_counter
        if method == "engine":
            return EngineCounter(self.client, self._any_url, self.estimate)
        if method == "tokenizer":
            return LocalTokenizerCounter(self.config.tokenizer_file)
        return self.estimate

    def _any_url(self) -> str | None:
        for role in ROLES:
            for u in self.pools[role]:
                if u.eligible():
                    return u.url
        return None

    # ----- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Probe every upstream once, then keep checking in the background."""
        await self.check_health()
        self._health_task = asyncio.ensure_future(self._health_loop())

    async def close(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        self.admission.fail_all("the router is shutting down")
        self.wire.close()
        await self.client.aclose()
        await self.health_client.aclose()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                await self.check_health()
            except Exception:  # never let the loop die
                log.exception("health check failed")

    async def check_health(self, ups: list[Upstream] | None = None) -> None:
        targets = ups if ups is not None else [u for r in ROLES for u in self.pools[r]]
        await asyncio.gather(*(self._probe(u) for u in targets))
        self.admission.pump_all()

    async def _probe(self, u: Upstream) -> None:
        try:
            r = await self.health_client.get(u.url + "/health")
            ok = r.status_code == 200
            err = None if ok else f"/health answered {r.status_code}"
        except httpx.HTTPError as exc:
            ok, err = False, f"/health: {type(exc).__name__}"
        if ok and u.max_model_len is None:
            try:
                r = await self.health_client.get(u.url + "/v1/models")
                data = r.json().get("data") or []
                lens = [int(d["max_model_len"]) for d in data if isinstance(d, dict) and d.get("max_model_len")]
                u.max_model_len = max(lens) if lens else None
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
                pass
        if ok != u.healthy:
            log.info("upstream %s (%s) is %s%s", u.name, u.url, "healthy" if ok else "down",
                     f": {err}" if err else "")
        u.healthy, u.last_error = ok, err

    def mark_down(self, u: Upstream, why: str) -> None:
        if u.healthy:
            log.warning("upstream %s (%s) marked down: %s", u.name, u.url, why)
        u.healthy = False
        u.last_error = why
        self.admission.pump_all()

    def _on_release(self, role: str, waited: float) -> None:
        self.metrics.child(self.metrics.queue_time, role).observe(waited)  # type: ignore[attr-defined]

    # ----- endpoints -----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        roles = {r: any(u.eligible() for u in self.pools[r]) for r in ROLES}
        state = "ok" if all(roles.values()) else "degraded" if any(roles.values()) else "down"
        body = {"status": state, "roles": roles,
                "upstreams": {u.name: u.status() for r in ROLES for u in self.pools[r]}}
        return JSONResponse(body, status_code=503 if state == "down" else 200)

    def _refresh_gauges(self) -> None:
        m = self.metrics
        m.refresh(policy=self.store.policy, version=self.store.version, queue_length=self.admission.queue_length,
                  upstreams=[*self.upstreams.all(), *self.upstreams.detached], length_limit=self.length_limit,
                  now=self.clock())
        m.token_fallbacks.set(getattr(self.counter, "fallbacks", 0))

    async def metrics_endpoint(self, request: Request) -> Response:
        self._refresh_gauges()
        return Response(self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def models(self, request: Request) -> Response:
        for role in ROLES:
            for u in self.pools[role]:
                if not u.eligible():
                    continue
                try:
                    r = await self.client.get(u.url + "/v1/models", timeout=self.config.health_timeout_s * 5)
                except httpx.HTTPError:
                    continue
                return Response(r.content, status_code=r.status_code,
                                media_type=r.headers.get("content-type", "application/json"))
        return _error(503, "no healthy upstream to list models", "ServiceUnavailable")

    # ----- the policy API ------------------------------------------------------------------------

    def _auth(self, request: Request) -> Response | None:
        if not self.token:
            return _error(403, f"the policy API is off: no token is configured (set ${self.config.token_env} or "
                          "token_file in router.toml)", "PolicyApiOff")
        if not bearer_matches(request.headers.get("authorization", ""), self.token):
            return _error(401, "missing or wrong bearer token for the policy API", "Unauthorized",
                          {"WWW-Authenticate": 'Bearer realm="router policy"'})
        return None

    def policy_document(self) -> dict[str, Any]:
        pol = self.store.policy
        return {"version": self.store.version, "updated_at": self.store.updated_at, **pol.to_dict(),
                "status": {"length_limit_active": pol.length_limit_active(self.clock()),
                           "token_count_method": self.counter.method,
                           "queues": {r: self.admission.queue_length(r) for r in ROLES},
                           "upstreams": {u.name: u.status() for r in ROLES for u in self.pools[r]}}}

    async def get_policy(self, request: Request) -> Response:
        return self._auth(request) or JSONResponse(self.policy_document())

    async def policy_history(self, request: Request) -> Response:
        return self._auth(request) or JSONResponse({"version": self.store.version, "history": self.store.history})

    async def put_policy(self, request: Request) -> Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > POLICY_BODY_MAX:
                return _error(413, f"policy document over {POLICY_BODY_MAX} bytes", "RequestTooLarge")
        try:
            doc = load_document(raw)
        except PolicyError as exc:
            return _error(400, str(exc), "BadRequestError")
        source = f"PUT from {request.client.host if request.client else '?'}"
        try:
            entry = await self.apply_policy(doc, source)
        except PolicyError as exc:
            return _error(exc.status, str(exc), "PolicyError" if exc.status == 400 else "Conflict")
        return JSONResponse({"version": self.store.version, "changes": entry["changes"]})

    async def apply_policy(self, doc: Any, source: str) -> dict[str, Any]:
        """Validate and apply a whole policy document; PolicyError leaves everything unchanged."""
        async with self._policy_lock:
            new = parse_versioned(doc, version=self.store.version, now=self.clock(),
                                  default_max_in_flight=self.config.max_in_flight)
            known = self.upstreams.known
            prepared = {(r, s.name, s.url): Upstream(s.name, s.url, r) for r, s in new.all_upstreams()
                        if (r, s.name, s.url) not in known}
            if prepared:
                await asyncio.gather(*(self._probe(u) for u in prepared.values()))
            lens = {s.name: (known.get((r, s.name, s.url)) or prepared[(r, s.name, s.url)]).max_model_len
                    for r, s in new.all_upstreams()}
            check_limits(new, lens, now=self.clock(), previous=self.store.policy)
            old = self.store.policy
            entry = self.store.apply(new, source)
            self.length_limit.policy_changed(old, new, self.clock())
            self.upstreams.sync(new, prepared)
            self.admission.pump_all()
            return entry

    @property
    def policy(self) -> Policy:
        return self.store.policy
