"""The request path: read and check the body, count, apply rules, route, admit, forward, stream back."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from starlette.types import Message, Receive, Scope, Send

from router.admission import Admission
from router.config import RouterConfig
from router.decide import length_limit_refuses, route
from router.flight import Flight
from router.lean import (  # scope["extensions"][ON_DISCONNECT](fn): fn() on a hang-up; None unregisters
    CYCLE,
    ON_DISCONNECT,
    Begun,
)
from router.length_limit import LengthLimitTracker
from router.metrics import RouterMetrics
from router.policy import Policy
from router.release import NoUpstream, QueueFull
from router.tokens import BadPrompt, EstimateCounter, TokenCounter, parse_body
from router.upstreams import Upstream, other
from router.wire import ConnectFailed, Response, Sent, WireClient, WireError, WireTimeout

PROXY_PATHS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
_DROP_REQUEST = {b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te",
                 b"trailer", b"upgrade", b"proxy-connection", b"expect"}
_DROP_RESPONSE = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
                            b"date", b"server"})
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_JSON = [(b"content-type", b"application/json")]
log = logging.getLogger("router.proxy")
CONNECT_ATTEMPTS = 3


def error_json(status: int, message: str, err_type: str, **extra: Any) -> bytes:
    """vLLM's (and OpenAI's) nested error shape, with the router's extra fields."""
    return json.dumps({"error": {"message": message, "type": err_type, "param": None, "code": status,
                                 **extra}}).encode()


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    hdrs = list(_JSON if headers is None else headers)
    hdrs.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _model(doc: dict[str, Any]) -> str | None:
    """The request's model name, when it names one."""
    model = doc.get("model")
    return model if isinstance(model, str) else None


class _ConnectFailed(Exception):
    pass


class _Done:
    __slots__ = ("finished",)

    def __init__(self) -> None:
        self.finished = False


class _Admitted:
    """A request `Proxy.begin` admitted and forwarded at once: its upstream slot and the request in flight."""

    __slots__ = ("role", "sent", "started", "upstream")

    def __init__(self, role: str, upstream: Upstream, started: float, sent: Sent | None) -> None:
        self.role, self.upstream, self.started, self.sent = role, upstream, started, sent


class _Pending:
    """A request Proxy.begin took: what the rest of its way needs."""

    __slots__ = ("admitted", "body", "doc", "endpoint", "receive", "routed", "scope", "send", "threshold", "tokens")

    def __init__(self, scope: Scope, receive: Receive, send: Send, endpoint: str, body: bytes, doc: dict[str, Any],
                 tokens: int, routed: str, threshold: int, admitted: _Admitted) -> None:
        self.scope, self.receive, self.send, self.endpoint, self.body = scope, receive, send, endpoint, body
        self.doc, self.tokens, self.routed, self.threshold, self.admitted = doc, tokens, routed, threshold, admitted


def _response_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An engine's response headers as the client gets them (hop-by-hop and the engine's date and server dropped)."""
    return [(k, v) for k, v in headers if k.lower() not in _DROP_RESPONSE]


def _found_prompt_tokens(data: bytes) -> int | None:
    """The engine's own prompt_tokens in a response's bytes (its usage block), when there."""
    found = _PROMPT_TOKENS.search(data)
    return int(found.group(1)) if found else None


class ProxyHost(Protocol):
    """What the request path needs of the router (router.app.Router is one)."""

    config: RouterConfig
    metrics: RouterMetrics
    admission: Admission
    counter: TokenCounter
    wire: WireClient
    length_limit: LengthLimitTracker
    clock: Callable[[], float]

    @property
    def policy(self) -> Policy: ...

    def mark_down(self, u: Upstream, why: str) -> None: ...


class Proxy:
    """Handles POST /v1/completions and /v1/chat/completions as raw ASGI (the hot path)."""

    def __init__(self, router: ProxyHost) -> None:
        self.r = router
        self.m = router.metrics

    # ----- entry ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = scope["path"]
        kind = PROXY_PATHS[endpoint]
        status, route = await self._handle(scope, receive, send, kind, endpoint)
        self.m.request(endpoint, route, status)

    async def _reject(self, send: Send, status: int, rule: str, message: str, err_type: str,
                      headers: list[tuple[bytes, bytes]] | None = None, **extra: Any) -> int:
        self.m.reject(rule)
        await respond(send, status, error_json(status, message, err_type, rule=rule, **extra),
                      _JSON + (headers or []))
        return status

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | int | None:
        """The body; its size when it is over the limit (read no further); None when the client left."""
        limit = self.r.config.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    return declared
        parts: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                return size
            parts.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(parts)

    def begin(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> Begun:
        """A request whose whole body is in hand, taken as far as the engine in the callback that read it (the lean
        server, router/lean.py, calls this before it starts a task): routed, admitted at once and written on an idle
        engine connection. Returns True when it answers the request itself from the engine connection's callbacks
        (router/flight.py), else the rest (connect, relay a stream) to run as the request's task; None, having
        changed nothing, when the request needs more than that (a refusal, a count that awaits, a queue, the other
        pool): then __call__ serves it from the start.

        A body too short for any prompt it holds to reach the route threshold (EstimateCounter.most_tokens), with
        no length limit set, goes hot before it is read: the JSON is read and counted while the engine works, and a
        bad one is refused as _handle refuses it, its engine connection closed. The router's Python in front of the
        engine's write, timed in situ at 1,000 requests/s: 29-32 us (median) before, 19 us after."""
        endpoint = scope["path"]
        counter = self.r.counter
        if len(body) > self.r.config.max_body_bytes or not isinstance(counter, EstimateCounter):
            return None
        kind = PROXY_PATHS[endpoint]
        pol = self.r.policy
        read: tuple[dict[str, Any], int] | None = None
        if pol.length_limit_tokens is None and counter.most_tokens(len(body)) < pol.route_threshold_tokens:
            routed = "hot"  # no prompt a body this short holds reaches the threshold: routed before it is read
        else:
            try:
                doc, prompt = parse_body(kind, body)
            except BadPrompt:
                return None
            tokens = counter.count_now(prompt)
            pol, _, judged = self._judge(scope, doc, tokens)
            if judged is None:
                return None
            routed, read = judged, (doc, tokens)
        admission = self.r.admission
        u = admission.take_next(routed, announce=False)  # its own pool, a slot free at once; else the usual way
        if u is None:
            return None
        started = time.perf_counter()
        headers, path = self._forwarded(scope, endpoint)
        try:
            sent = self.r.wire.send_now(b"POST", u.url, path, body, headers)
        except WireError:
            sent = None  # the exchange below meets the same error and answers it
        if read is None:  # read now, the engine already at work on it
            try:
                doc, prompt = parse_body(kind, body)
            except BadPrompt as exc:  # the refusal it gets the usual way; the engine sees the request go
                if sent is not None:
                    self.r.wire.abandon(sent)
                admission.release(u, 0.0)
                return self._refuse_read(send, endpoint, str(exc))
            read = doc, counter.count_now(prompt)
        doc, tokens = read
        admission.announce(routed, admission.seq)  # its record once the engine has it: off the request's way
        p = _Pending(scope, receive, send, endpoint, body, doc, tokens, routed, pol.route_threshold_tokens,
                     _Admitted(routed, u, started, sent))
        cycle = scope.get("extensions", {}).get(CYCLE)
        if sent is None or cycle is None or doc.get("stream"):
            return self._finish(p)
        Flight(self, self.r.wire, sent, cycle, p).start()  # answered from callbacks (router/flight.py)
        return True

    async def _refuse_read(self, send: Send, endpoint: str, why: str) -> None:
        """A body forwarded before it was read turned out bad: the 400 the usual way gives it (_handle)."""
        status = await self._reject(send, 400, "bad_request", why, "BadRequestError")
        self.m.request(endpoint, "none", status)

    async def _finish(self, p: _Pending) -> None:
        status, role = await self._watched(p.scope, p.receive, p.routed, lambda done: self._run(
            p.scope, p.send, p.endpoint, p.body, p.doc, p.tokens, p.routed, p.threshold, done, p.admitted))
        self.m.request(p.endpoint, role, status)

    # ----- a Flight's owner: the answer in hand relayed from the engine connection's callback ----------------------

    def answer_now(self, flight: Flight) -> None:
        p: _Pending = flight.request
        a = p.admitted
        status, headers, body = self.r.wire.take_whole(flight.sent)
        flight.cycle.respond(status, headers, body, _DROP_RESPONSE)
        try:  # answered: what follows never hands the request to a task
            self.r.wire.settle(flight.sent)
            self.r.admission.release(a.upstream, time.perf_counter() - a.started)
            self.m.request(p.endpoint, a.role, status)
            self._check_route(p.tokens, p.threshold, _found_prompt_tokens(body[-4096:]) if status == 200 else None)
        except Exception:
            log.exception("exception accounting for a relayed answer")

    def hung_up(self, flight: Flight) -> None:
        p: _Pending = flight.request
        self.r.admission.release(p.admitted.upstream, time.perf_counter() - p.admitted.started)
        self.m.request(p.endpoint, p.routed, 499)

    def later(self, flight: Flight) -> Coroutine[Any, Any, None]:
        return self._finish(flight.request)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, kind: str,
                      endpoint: str) -> tuple[int, str]:
        body = await self._read_body(scope, receive)
        if body is None:
            return 499, "none"
        limit = self.r.config.max_body_bytes
        if isinstance(body, int):
            return await self._reject(send, 413, "body_too_large",
                                      f"request body too large: {body} bytes or more; the limit is {limit} bytes",
                                      "RequestTooLarge", limit_bytes=limit), "none"
        try:
            doc, prompt = parse_body(kind, body)
        except BadPrompt as exc:
            return await self._reject(send, 400, "bad_request", str(exc), "BadRequestError"), "none"
        tokens = await self.r.counter.count(prompt, _model(doc))
        pol, now, role = self._judge(scope, doc, tokens)
        if role is None:
            self.r.length_limit.refused(now)
            return await self._reject(
                send, 413, "length_limit",
                f"prompt of about {tokens} tokens is over the emergency length limit of {pol.length_limit_tokens} "
                "tokens", "PromptTooLong", limit_tokens=pol.length_limit_tokens, prompt_tokens=tokens,
                expires_at=pol.length_limit_expires_at), "none"
        threshold = pol.route_threshold_tokens
        return await self._watched(scope, receive, role, lambda done: self._run(
            scope, send, endpoint, body, doc, tokens, role, threshold, done))

    def _judge(self, scope: Scope, doc: dict[str, Any], tokens: int) -> tuple[Policy, float, str | None]:
        """The policy in force, its time and the pool a prompt of `tokens` goes to; None for the pool when the
        emergency length limit refuses it. Shared by begin and _handle, which differ only in how they count."""
        pol = self.r.policy
        now = self.r.clock()
        if pol.length_limit_tokens is not None and length_limit_refuses(
                pol, tokens, now, model=_model(doc), client=lambda: self._client_id(scope, doc)):
            return pol, now, None
        return pol, now, route(pol, tokens)

    async def _watched(self, scope: Scope, receive: Receive, routed: str,
                       run: Callable[[_Done], Awaitable[tuple[int, str]]]) -> tuple[int, str]:
        """`run` cancelled when the client hangs up before its response is finished: then 499."""
        done = _Done()
        task = asyncio.current_task()
        assert task is not None
        hook = scope.get("extensions", {}).get(ON_DISCONNECT)
        left = [False]

        def gone() -> None:
            if not done.finished:
                left[0] = True
                task.cancel()

        watch = None if hook is not None else asyncio.ensure_future(self._watch(receive, gone))
        if hook is not None:
            hook(gone)  # the lean server (router/lean.py) calls it when the client hangs up: no watcher task
        try:
            return await run(done)
        except asyncio.CancelledError:
            if not done.finished and left[0]:  # the client went away
                return 499, routed
            raise
        finally:
            if watch is not None:
                watch.cancel()
            elif hook is not None:
                hook(None)

    @staticmethod
    def _client_id(scope: Scope, doc: dict[str, Any]) -> str:
        for name, value in scope["headers"]:
            if name == b"x-client-id":
                return value.decode("latin-1")
        user = doc.get("user")
        if isinstance(user, str) and user:
            return user
        client = scope.get("client")
        return str(client[0]) if client else ""

    @staticmethod
    async def _watch(receive: Receive, gone: Callable[[], None]) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                gone()
                return

    # ----- routing and admission -----------------------------------------------------------------

    @staticmethod
    def _forwarded(scope: Scope, endpoint: str) -> tuple[list[tuple[bytes, bytes]], str]:
        """The request's headers as the engine gets them, and its path with the query."""
        headers = [(k, v) for k, v in scope["headers"] if k not in _DROP_REQUEST]
        return headers, endpoint + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string")
                                    else "")

    async def _run(self, scope: Scope, send: Send, endpoint: str, body: bytes, doc: dict[str, Any], tokens: int,
                   routed: str, threshold: int, done: _Done, admitted: _Admitted | None = None) -> tuple[int, str]:
        headers, path = self._forwarded(scope, endpoint)
        stream = bool(doc.get("stream"))
        for _ in range(CONNECT_ATTEMPTS):
            sent: Sent | None = None
            if admitted is not None:  # Proxy.begin admitted it and sent it already
                role, u, started, sent = admitted.role, admitted.upstream, admitted.started, admitted.sent
                admitted = None
            else:
                found = self.r.admission.role_for(routed, tokens)
                if found is None:
                    return await self._no_upstream(send, routed, tokens), routed
                role = found
                try:
                    u = await self.r.admission.acquire(role, tokens)
                except QueueFull as exc:
                    return await self._reject(send, 429, "queue_full", str(exc), "TooManyRequests",
                                              [(b"retry-after", str(exc.retry_after).encode())],
                                              retry_after_s=exc.retry_after), role
                except NoUpstream as exc:
                    return await self._reject(send, 503, "no_upstream", str(exc), "ServiceUnavailable"), role
                started = time.perf_counter()
            try:
                status = await self._exchange(u, send, path, body, headers, stream, tokens, threshold, done, sent)
                return status, role
            except _ConnectFailed:
                continue
            finally:
                self.r.admission.release(u, time.perf_counter() - started)
        return await self._reject(send, 503, "no_upstream", f"could not connect to any {routed} upstream "
                                  f"after {CONNECT_ATTEMPTS} attempts", "ServiceUnavailable"), routed

    async def _no_upstream(self, send: Send, role: str, tokens: int) -> int:
        alt = other(role)
        why = f"no active, healthy {role} upstream"
        if self.r.admission.has_eligible(alt):
            why += f", and the prompt (about {tokens} tokens) does not fit the {alt} engine's max_model_len"
        else:
            why += f" and no {alt} upstream either"
        return await self._reject(send, 503, "no_upstream", why, "ServiceUnavailable")

    # ----- the exchange with the engine ----------------------------------------------------------

    async def _exchange(self, u: Upstream, send: Send, path: str, body: bytes, headers: list[tuple[bytes, bytes]],
                        stream: bool, tokens: int, threshold: int, done: _Done, sent: Sent | None = None) -> int:
        try:
            resp = await (self.r.wire.answer(sent) if sent is not None else self.r.wire.post(u.url, path, body,
                                                                                             headers))
        except ConnectFailed as exc:
            self.r.mark_down(u, f"connect: {exc}")
            self.m.child(self.m.upstream_errors, u.name, "connect").inc()  # type: ignore[attr-defined]
            raise _ConnectFailed from None
        except WireTimeout:
            self.m.child(self.m.upstream_errors, u.name, "timeout").inc()  # type: ignore[attr-defined]
            return await self._reject(send, 504, "upstream_timeout", f"upstream {u.name} ({u.url}) sent no "
                                      f"response within {self.r.config.upstream_timeout_s:g} s", "GatewayTimeout",
                                      upstream=u.name)
        except WireError as exc:
            self.m.child(self.m.upstream_errors, u.name, "protocol").inc()  # type: ignore[attr-defined]
            return await self._reject(send, 502, "upstream_error", f"upstream {u.name} ({u.url}) failed: {exc}",
                                      "BadGateway", upstream=u.name)
        try:
            return await self._relay(u, resp, send, tokens, threshold, done)
        finally:
            resp.close()

    async def _relay(self, u: Upstream, resp: Response, send: Send, tokens: int, threshold: int,
                     done: _Done) -> int:
        status = resp.status
        await send({"type": "http.response.start", "status": status, "headers": _response_headers(resp.headers)})
        sse = resp.header(b"content-type").startswith(b"text/event-stream")
        actual: int | None = None
        tail = b""
        last: float | None = None
        gap = self.m.child(self.m.gap, u.name, u.role) if sse else None
        gap_sq = self.m.child(self.m.gap_sq, u.name, u.role) if sse else None
        msg: Message
        try:
            while (chunk := await resp.read_chunk()) is not None:
                if sse:
                    n = chunk.count(b"data:")
                    if n:
                        idle = (chunk.count(b"[DONE]") + chunk.count(b'"choices": []') + chunk.count(b'"choices":[]')
                                + chunk.count(b'"role"'))
                        if n > idle:
                            now = time.perf_counter()
                            if last is not None:
                                g = now - last
                                gap.observe(g)  # type: ignore[union-attr]
                                gap_sq.inc(g * g)  # type: ignore[union-attr]
                            last = now
                        if b'"prompt_tokens"' in chunk:
                            found = _PROMPT_TOKENS.search(chunk)
                            if found:
                                actual = int(found.group(1))
                else:
                    tail = (tail + chunk)[-4096:]
                msg = {"type": "http.response.body", "body": chunk, "more_body": True}
                await send(msg)
        except WireTimeout:
            self.m.child(self.m.upstream_errors, u.name, "timeout").inc()  # type: ignore[attr-defined]
            self.m.reject("upstream_timeout")
            if sse:
                err = error_json(504, f"upstream {u.name} sent nothing for {self.r.config.upstream_timeout_s:g} s "
                                 "mid-stream", "GatewayTimeout", upstream=u.name)
                await send({"type": "http.response.body", "body": b"data: " + err + b"\n\n", "more_body": True})
            status = 504
        except WireError as exc:
            self.m.child(self.m.upstream_errors, u.name, "protocol").inc()  # type: ignore[attr-defined]
            if sse:
                err = error_json(502, f"upstream {u.name} failed mid-stream: {exc}", "BadGateway",
                                 upstream=u.name)
                await send({"type": "http.response.body", "body": b"data: " + err + b"\n\n", "more_body": True})
            status = 502
        done.finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if not sse and status == 200:
            actual = _found_prompt_tokens(tail)
        self._check_route(tokens, threshold, actual)
        return status

    def _check_route(self, tokens: int, threshold: int, actual: int | None) -> None:
        """Count the engine's own prompt_tokens against the router's estimate: a misroute when they fall on the two
        sides of the route threshold."""
        if actual is None:
            return
        self.m.checked.inc()
        if (tokens < threshold) != (actual < threshold):
            self.m.child(self.m.misrouted,  # type: ignore[attr-defined]
                         "long_as_short" if tokens < threshold else "short_as_long").inc()
