"""One request and its response on a lean server connection (router/lean.py): the body as it arrives, ASGI
receive and send, the response head held until its first body bytes, and the client's hang-up told to whoever
watches it."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from http import HTTPStatus
from typing import Any, Protocol

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
SendFn = Callable[[Message], Awaitable[None]]
BODY_HIGH_WATER = 1 << 20  # request body bytes buffered before the server stops reading the client
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_DISCONNECT: Message = {"type": "http.disconnect"}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Connection(Protocol):
    """What a cycle needs of its connection (router.lean.LeanProtocol)."""

    loop: asyncio.AbstractEventLoop
    parsing: Cycle | None
    write_paused: bool

    def write(self, data: bytes) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    async def drain(self) -> None: ...

    def response_complete(self, cycle: Cycle) -> None: ...

    def spawn(self, cycle: Cycle, coro: Coroutine[Any, Any, None]) -> None: ...


class _Date:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self.second = 0
        self.value = b""

    def __call__(self) -> bytes:
        now = int(time.time())
        if now != self.second:
            self.second = now
            self.value = b"date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
        return self.value


_date = _Date()


class Cycle:
    """One request and its response on a connection."""

    __slots__ = ("body", "body_done", "body_size", "chunked", "conn", "continue_sent", "deferred", "delivered",
                 "disconnected", "expect",
                 "head", "head_only", "keep_alive", "on_gone", "response_done", "scope", "started", "waiter")

    def __init__(self, conn: Connection, scope: MutableMapping[str, Any], keep_alive: bool, expect: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect = expect  # the client waits for 100 Continue before sending the body
        self.continue_sent = False
        self.deferred = False  # started only once its whole body is in, through the app's `begin`
        self.head_only = scope["method"] == "HEAD"
        self.body: list[bytes] = []
        self.body_size = 0
        self.body_done = False
        self.delivered = False
        self.disconnected = False
        self.waiter: asyncio.Future[None] | None = None
        self.on_gone: Callable[[], None] | None = None  # told when the client hangs up (router.on_disconnect)
        self.head: bytes | None = None  # the response head, held until the first body bytes
        self.started = False  # response.start seen
        self.chunked = False
        self.response_done = False

    def hang_up(self) -> None:
        self.disconnected = True
        self.wake()
        gone, self.on_gone = self.on_gone, None
        if gone is not None:
            gone()

    def watch(self, fn: Callable[[], None] | None) -> None:
        self.on_gone = fn
        if fn is not None and self.disconnected:  # gone before the app watched
            self.on_gone = None
            fn()

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def feed(self, data: bytes) -> None:
        self.body.append(data)
        self.body_size += len(data)
        if self.body_size > BODY_HIGH_WATER:
            self.conn.pause_reading()
        self.wake()

    async def receive(self) -> Message:
        while True:
            if self.disconnected or self.response_done:
                return _DISCONNECT
            if not self.delivered and (self.body or self.body_done):
                data = self.body[0] if len(self.body) == 1 else b"".join(self.body)
                self.body.clear()
                self.body_size = 0
                if self.body_done:
                    self.delivered = True  # the next receive waits for the client to leave
                elif self.conn.parsing is self:
                    self.conn.resume_reading()
                return {"type": "http.request", "body": data, "more_body": not self.body_done}
            if self.expect and not self.continue_sent and not self.body_done:
                self.continue_sent = True
                self.conn.write(_CONTINUE)
            self.waiter = self.conn.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None

    async def send(self, message: Message) -> None:
        if self.emit(message):
            await self.conn.drain()

    def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes,
                drop: frozenset[bytes] = frozenset()) -> None:
        """The whole response at once, from a callback (the proxy's answer in hand: router/flight.py): what a start
        and one last body message through `emit` write, in one write, framed by the body's own length (an
        `headers` content-length or transfer-encoding is left out, and so is every header named in `drop`, by its
        lower-case name)."""
        if self.disconnected or self.response_done:
            return
        if self.started:
            raise RuntimeError("http.response.start sent twice")
        self.started = True
        parts = [b"HTTP/1.1 ", str(status).encode(), b" ", _REASONS.get(status, b""), b"\r\n", _date()]
        for name, value in headers:
            lower = name.lower()
            if lower in drop or lower == b"content-length" or lower == b"transfer-encoding":
                continue
            if lower == b"connection":
                if value.lower() == b"close":
                    self.keep_alive = False
                continue
            parts += (name, b": ", value, b"\r\n")
        if status >= 200 and status not in (204, 304):
            parts += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        if self.expect and not self.continue_sent and not self.body_done:
            self.keep_alive = False  # the client holds its body back: what it sends next is not a request
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        elif self.scope["http_version"] == "1.0":
            parts.append(b"connection: keep-alive\r\n")
        parts.append(b"\r\n")
        if body and not self.head_only and status >= 200 and status not in (204, 304):
            parts.append(body)
        self.response_done = True
        self.conn.write(b"".join(parts))
        self.conn.response_complete(self)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Go on with this request in a task after all (what `begin` took and could not finish in callbacks)."""
        self.conn.spawn(self, coro)

    def emit(self, message: Message) -> bool:
        """An ASGI send's work without its wait: True when the writer should wait for the client to drain."""
        if self.disconnected or self.response_done:
            return False
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            status = int(message["status"])
            parts = [b"HTTP/1.1 ", str(status).encode(), b" ", _REASONS.get(status, b""), b"\r\n", _date()]
            framed = False
            for name, value in message.get("headers", ()):
                lower = name.lower()
                if lower == b"content-length" or lower == b"transfer-encoding":
                    framed = True
                elif lower == b"connection":
                    if value.lower() == b"close":
                        self.keep_alive = False
                    continue
                parts += (name, b": ", value, b"\r\n")
            self.chunked = not framed and status >= 200 and status not in (204, 304)
            if self.expect and not self.continue_sent and not self.body_done:
                self.keep_alive = False  # the client holds its body back: what it sends next is not a request
            self.head = b"".join(parts)
            return False
        if kind != "http.response.body":
            return False
        if not self.started:
            raise RuntimeError("http.response.body before http.response.start")
        body = message.get("body", b"")
        more = bool(message.get("more_body", False))
        out: list[bytes] = []
        if self.head is not None:
            head, self.head = self.head, None
            if self.chunked and not more:  # the whole body in one message: say its length
                self.chunked = False
                head += b"content-length: " + str(len(body)).encode() + b"\r\n"
            elif self.chunked and self.scope["http_version"] == "1.0":
                self.chunked, self.keep_alive = False, False  # HTTP/1.0 cannot read chunks: the close ends it
            elif self.chunked:
                head += b"transfer-encoding: chunked\r\n"
            if not self.keep_alive:
                head += b"connection: close\r\n"
            elif self.scope["http_version"] == "1.0":
                head += b"connection: keep-alive\r\n"
            out.append(head + b"\r\n")
        if body and not self.head_only:
            out.append(b"%x\r\n%s\r\n" % (len(body), body) if self.chunked else body)
        if not more:
            if self.chunked and not self.head_only:
                out.append(b"0\r\n\r\n")
            self.response_done = True
        if out:
            self.conn.write(out[0] if len(out) == 1 else b"".join(out))
        if not more:
            self.conn.response_complete(self)
            return False
        return self.conn.write_paused
