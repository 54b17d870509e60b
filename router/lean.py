"""The router's own HTTP/1.1 server: an asyncio Protocol on httptools that drives the router's ASGI callable.

uvicorn cost the router about two thirds of its added latency beside nginx (bench/router_overhead.py --nginx):
its cycle objects, per-message checks and a write per header block and per body message. This server does only
what the router needs: HTTP/1.1 keep-alive with pipelining (one request at a time per connection, in order),
Content-Length and chunked request bodies, `Expect: 100-continue`, HEAD, flow control both ways, a keep-alive
idle timeout, the response head written together with its first body bytes, and client hang-ups reported to the
app as `http.disconnect`. The guard's refusals hold as under uvicorn (router/guard.py): heads over the limit get
431, smuggling shapes and malformed framing 400, both with `Connection: close` and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, Literal
from urllib.parse import unquote

import httptools

from router.guard import DEFAULT_MAX_HEADER_BYTES, HeaderBudget, Refused, framing_problem
from router.lean_cycle import BODY_HIGH_WATER, Cycle, Receive, SendFn

_ASGI = {"version": "3.0", "spec_version": "2.3"}  # every scope's "asgi" (one dict: nothing writes to it)
_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH")}
ON_DISCONNECT = "router.on_disconnect"  # the scope extension the proxy (router/proxy.py) watches hang-ups with
CYCLE = "router.cycle"  # the scope extension holding the request's Cycle (what a `begin` that took it answers with)

log = logging.getLogger("router.http")

App = Callable[[MutableMapping[str, Any], Receive, SendFn], Awaitable[None]]
# The app's synchronous start (see LeanProtocol.begin): the rest to run as a task; True when it took the request whole
# (it answers through scope["extensions"][CYCLE], spawning a task there if it must); None when it declined.
Begun = Coroutine[Any, Any, None] | Literal[True] | None
Begin = Callable[[MutableMapping[str, Any], bytes, Receive, SendFn], Begun]
KEEP_ALIVE_S = 30.0
DISCARD_MAX = 64 << 20  # unread request body bytes skipped after the response before the connection is closed
_REFUSED = {400: "Bad Request", 431: "Request Header Fields Too Large"}


class LeanProtocol(HeaderBudget, asyncio.Protocol):
    """One client connection."""

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop, *, scheme: str = "http",
                 max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES, keep_alive_s: float = KEEP_ALIVE_S,
                 connections: set[LeanProtocol] | None = None) -> None:
        self.app = app
        # The app's synchronous start for a request whose body is all in (router.app.Router.begin): it may take the
        # request as far as the engine in the callback that read it and return the rest as the task to run, or take
        # it whole (True) and answer it from later callbacks.
        self.begin: Begin | None = getattr(app, "begin", None)
        self.loop = loop
        self.scheme = scheme
        self.max_header_bytes = max_header_bytes
        self.keep_alive_s = keep_alive_s
        self.connections = connections if connections is not None else set()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.cycles: deque[Cycle] = deque()  # the first runs; the others wait their turn (pipelining)
        self.parsing: Cycle | None = None  # the request whose body is arriving
        self.discard = 0  # body bytes of a finished request skipped so far (-1: not discarding)
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False
        self.read_paused = False
        self.write_paused = False
        self.drain_waiters: list[asyncio.Future[None]] = []
        self.refusal: Refused | None = None
        self.last_active = loop.time()
        self.idle_timer: asyncio.TimerHandle | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head = 0
        self._raw = 0
        self._in_head = False

    # ----- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self.server = (str(sock[0]), int(sock[1])) if isinstance(sock, tuple) else None
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.connections.discard(self)
        for cycle in list(self.cycles):
            cycle.hang_up()
        if self.parsing is not None:
            self.parsing.hang_up()
        self._wake_drain()
        if self.idle_timer is not None:
            self.idle_timer.cancel()

    def data_received(self, data: bytes) -> None:
        self.last_active = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgrade_ignored()
            return
        except httptools.HttpParserError as exc:
            cause = exc.__cause__ or exc.__context__
            self._refuse(cause if isinstance(cause, Refused) else Refused(400, f"malformed HTTP request: {exc}"))
            return
        if self._in_head:  # a header line still arriving: httptools buffers it whole, so bound it too
            self._raw += len(data)
            if self._raw > 2 * self.max_header_bytes + 65536:
                self._refuse(self._too_large())

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drain()

    # ----- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_head, self._head, self._raw = True, 0, 0
        self._url = b""
        self._headers = []

    def on_url(self, url: bytes) -> None:
        self._count(len(url) + 16)
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head += len(name) + len(value) + 4  # HeaderBudget._count, inline: one call a header fewer
        if self._head > self.max_header_bytes:
            raise self._too_large()
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        headers = self._headers
        problem = framing_problem(headers)
        if problem is not None:
            raise problem
        target = self._url
        if target[:1] == b"/" and b"?" not in target and b"#" not in target:
            raw_path, query = target, b""  # a plain origin-form path (the usual request): nothing to split
        else:
            url = httptools.parse_url(target)
            raw_path, query = url.path or b"/", url.query or b""
        method = self.parser.get_method()
        scope: MutableMapping[str, Any] = {
            "type": "http", "asgi": _ASGI, "http_version": self.parser.get_http_version(),
            "method": _METHODS.get(method) or method.decode("ascii"), "scheme": self.scheme,
            "path": _unquote(raw_path), "raw_path": raw_path, "query_string": query, "root_path": "",
            "headers": headers, "client": self.client, "server": self.server, "state": {}}
        expect = False
        length = -1
        for n, v in headers:
            if n == b"expect":
                expect = expect or v.lower() == b"100-continue"
            elif n == b"content-length":  # one, and a number (framing_problem)
                length = int(v)
        cycle = Cycle(self, scope, self.parser.should_keep_alive(), expect)
        if self.begin is not None and 0 <= length <= BODY_HIGH_WATER and not expect and scope["method"] == "POST":
            cycle.deferred = True  # small enough to hold whole: started through `begin` once it is all in
        scope["extensions"] = {ON_DISCONNECT: cycle.watch, CYCLE: cycle}
        self.parsing = cycle
        self.cycles.append(cycle)
        if len(self.cycles) == 1:
            self._start(cycle)
        else:
            self.pause_reading()  # pipelined: read on once the requests ahead are answered

    def on_body(self, body: bytes) -> None:
        cycle = self.parsing
        if cycle is None:
            self.discard += len(body)
            if self.discard > DISCARD_MAX:
                self.close()
            return
        cycle.feed(body)

    def on_message_complete(self) -> None:
        cycle = self.parsing
        self.parsing = None
        self.discard = 0
        if cycle is not None:
            cycle.body_done = True
            cycle.wake()
            if cycle.deferred and self.cycles and self.cycles[0] is cycle:
                self._start(cycle)
        elif self.cycles:
            return
        else:
            self._next()

    # ----- cycles --------------------------------------------------------------------------------

    def _start(self, cycle: Cycle) -> None:
        coro: Coroutine[Any, Any, None] | None = None
        if cycle.deferred:
            if not cycle.body_done:
                return  # started when its body is in (on_message_complete)
            cycle.deferred = False
            begun = self._begin(cycle)
            if begun is True:
                return  # the app answers it from callbacks
            coro = begun
        self.spawn(cycle, coro)

    def spawn(self, cycle: Cycle, coro: Coroutine[Any, Any, None] | None) -> None:
        """Serve `cycle` in a task: `coro` (what `begin` returned) or the app from the start."""
        task = self.loop.create_task(self._run(cycle, coro))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _begin(self, cycle: Cycle) -> Begun:
        """The app's `begin` with the whole body; None (the body left for `receive`) when it declines or fails."""
        assert self.begin is not None
        body = cycle.body[0] if len(cycle.body) == 1 else b"".join(cycle.body)
        try:
            coro = self.begin(cycle.scope, body, cycle.receive, cycle.send)
        except Exception:
            log.exception("exception in the router's request handler (begin); serving the request the usual way")
            return None
        if coro is not None:
            cycle.body.clear()
            cycle.body_size = 0
            cycle.delivered = True  # the app has the body: receive() waits for the client to leave
        return coro

    async def _run(self, cycle: Cycle, begun: Coroutine[Any, Any, None] | None = None) -> None:
        try:
            await (begun if begun is not None else self.app(cycle.scope, cycle.receive, cycle.send))
        except asyncio.CancelledError:
            self.close()
            raise
        except Exception:  # the app failed: a 500 when nothing was said yet, else the connection goes
            log.exception("exception in the router's request handler")
            if not cycle.started and not cycle.disconnected:
                body = b'{"error":{"message":"internal error","type":"InternalServerError","code":500}}'
                await cycle.send({"type": "http.response.start", "status": 500,
                                  "headers": [(b"content-type", b"application/json")]})
                await cycle.send({"type": "http.response.body", "body": body})
                return
        if not cycle.response_done and not cycle.disconnected:
            self.close()  # the app returned without finishing its response

    def response_complete(self, cycle: Cycle) -> None:
        if self.cycles and self.cycles[0] is cycle:
            self.cycles.popleft()
        if not cycle.keep_alive or self.closed:
            self.close()
            return
        if self.parsing is cycle:  # the body is still arriving: skip it, then go on
            self.parsing = None
            self.discard = 0
            cycle.body.clear()
            self.resume_reading()
            return
        self._next()

    def _next(self) -> None:
        """The request ahead is answered: start the next, refuse what was refused, or read on."""
        if self.cycles:
            self._start(self.cycles[0])
        elif self.refusal is not None:
            self._write_refusal(self.refusal)
            return
        self.resume_reading()
        if not self.cycles:
            self.last_active = self.loop.time()
            self._arm_idle()

    def _upgrade_ignored(self) -> None:
        """An Upgrade (h2c, websocket) is not taken: a request without a body is answered over HTTP/1.1 and the
        connection closed after it (the parser reads nothing more on it); one with a body is refused."""
        cycle = self.parsing
        declared = [v for n, v in cycle.scope["headers"] if n in (b"content-length", b"transfer-encoding")] \
            if cycle is not None else [b"?"]
        if cycle is None or (declared and declared != [b"0"]):
            self._refuse(Refused(400, "protocol upgrades are not supported"))
            return
        self.pause_reading()
        self.parsing = None
        cycle.keep_alive = False
        cycle.body_done = True
        cycle.wake()

    # ----- refusals ------------------------------------------------------------------------------

    def _refuse(self, exc: Refused) -> None:
        who = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
        log.warning("refused a request from %s: %d %s", who, exc.status, exc.reason)
        self.pause_reading()
        bad = self.parsing
        if bad is not None:  # its body was malformed: the app reading it sees the client gone
            bad.hang_up()
            self.parsing = None
            if bad is not self.cycles[0]:
                self.cycles.remove(bad)  # pipelined, not started: it never runs
        ahead = [c for c in self.cycles if c is not bad and not c.response_done]
        if ahead:  # answer the sound requests before it first
            self.refusal = exc
            return
        if bad is None or not bad.started:
            self._write_refusal(exc)
        else:
            self.close()

    def _write_refusal(self, exc: Refused) -> None:
        body = json.dumps({"error": {"message": exc.reason, "type": _REFUSED[exc.status].replace(" ", ""),
                                     "code": exc.status}}).encode()
        head = (f"HTTP/1.1 {exc.status} {_REFUSED[exc.status]}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
        self.write(head + body)
        self.close()

    # ----- transport -----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def pause_reading(self) -> None:
        if not self.read_paused and self.transport is not None and not self.closed:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused and self.transport is not None and not self.closed:
            self.read_paused = False
            self.transport.resume_reading()

    async def drain(self) -> None:
        if not self.write_paused or self.closed:
            return
        fut = self.loop.create_future()
        self.drain_waiters.append(fut)
        await fut

    def _wake_drain(self) -> None:
        waiters, self.drain_waiters = self.drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _arm_idle(self) -> None:
        if self.idle_timer is None and not self.closed:
            self.idle_timer = self.loop.call_at(self.last_active + self.keep_alive_s, self._idle_check)

    def _idle_check(self) -> None:
        """One timer per connection, not one per request: it fires at the deadline of the last idle moment it knew
        of and looks again (a timer per request was 7% of the router's CPU in py-spy)."""
        self.idle_timer = None
        if self.closed:
            return
        if self.cycles:  # busy: idle time starts when the response is done
            self.idle_timer = self.loop.call_at(self.loop.time() + self.keep_alive_s, self._idle_check)
            return
        if self.loop.time() - self.last_active >= self.keep_alive_s:
            self.close()
        else:
            self._arm_idle()

    def shutdown(self) -> None:
        """Close now when idle, else once the request in hand is answered."""
        if not self.cycles:
            self.close()
        else:
            for cycle in self.cycles:
                cycle.keep_alive = False


def _unquote(raw: bytes) -> str:
    text = raw.decode("latin-1")
    return unquote(text) if "%" in text else text


class LeanServer:
    """Serve an ASGI callable on listening sockets until `should_exit` is set (from any thread)."""

    def __init__(self, app: App, *, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                 ssl_context: Any = None, keep_alive_s: float = KEEP_ALIVE_S, graceful_s: float = 3.0) -> None:
        self.app = app
        self.max_header_bytes = max_header_bytes
        self.ssl = ssl_context
        self.keep_alive_s = keep_alive_s
        self.graceful_s = graceful_s
        self.should_exit = False
        self.started = False
        self.connections: set[LeanProtocol] = set()

    async def serve(self, sockets: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        scheme = "https" if self.ssl is not None else "http"

        def factory() -> LeanProtocol:
            return LeanProtocol(self.app, loop, scheme=scheme, max_header_bytes=self.max_header_bytes,
                                keep_alive_s=self.keep_alive_s, connections=self.connections)

        servers = [await loop.create_server(factory, sock=s, ssl=self.ssl, backlog=2048) for s in sockets]
        self.started = True
        try:
            while not self.should_exit:
                await asyncio.sleep(0.1)
        finally:
            for srv in servers:
                srv.close()
            for conn in list(self.connections):
                conn.shutdown()
            deadline = loop.time() + self.graceful_s
            while self.connections and loop.time() < deadline:
                await asyncio.sleep(0.05)
            for conn in list(self.connections):
                for task in list(conn.tasks):
                    task.cancel()
                if conn.transport is not None:
                    conn.transport.abort()
            with contextlib.suppress(Exception):
                for srv in servers:
                    await srv.wait_closed()
