"""A lean keep-alive HTTP/1.1 client for the proxy's hot path (router -> engine).

httpx costs the router about a millisecond of CPU per proxied request on a 2-core machine (anyio
cancel scopes, h11 event objects, a failed `import sniffio` per call in httpcore), which alone breaks
the router's budget of 1 ms added at P50 (bench/router_overhead.py). This client does only what the
proxy needs: POST one pre-built request on a pooled connection (http or https, a path prefix kept),
parse the response with httptools (the C parser uvicorn uses), and hand the body over as it arrives,
with back-pressure, timeouts and clean close on cancellation (so a client that leaves makes the engine
see a disconnect). Everything else the router says to engines (health, /tokenize, /v1/models) still goes through httpx.
The daemon's reads (doctor/wire_transport.py) send their GETs through `send` for the same reason.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 1 << 20  # bytes buffered from an engine before the router stops reading it
LOW_WATER = 1 << 18
IDLE_EXPIRY_S = 4.0  # vLLM's (uvicorn's) keep-alive timeout is 5 s: never reuse a connection close to it
MAX_IDLE_PER_ORIGIN = 512


class WireError(Exception):
    """Any failure talking to an engine; `kind` is connect, timeout or protocol."""

    kind = "protocol"


class ConnectFailed(WireError):
    kind = "connect"


class ConnectTimedOut(ConnectFailed):
    """The engine did not accept the connection in time."""


class WireTimeout(WireError):
    kind = "timeout"


class _Stale(WireError):
    """A reused connection closed before a single response byte: safe to send again on a fresh one."""


class _Conn(asyncio.Protocol):
    """One TCP connection to an engine, carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.unasked = False  # the engine sent a second response to one request (a 408 before closing): poisoned
        self.idle_since = 0.0
        self.listener: Callable[[], None] | None = None  # told after every read and at the close (WireClient.listen)
        self.deadline = 0.0  # when the listener's wait times out (loop time), and what it waits at most
        self.timeout_s = 0.0
        self.deadline_timer: asyncio.TimerHandle | None = None  # one per connection, not one per request
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.got_bytes = False
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.until_eof = True  # neither content-length nor chunked: the body ends when the engine closes
        self.event_stream = False  # the answer's content-type is text/event-stream (a streamed completion)
        self.interim = False  # inside a 1xx response, which precedes the real one
        self.error: WireError | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None

    # ----- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(WireError(f"malformed HTTP response: {exc}"))
            self.abort()
        if self.listener is not None:
            self.listener()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.complete:
            pass
        elif self.head_done and self.until_eof and exc is None:
            self.complete = True
            self._wake()
        elif not self.got_bytes:
            self._fail(_Stale("the engine closed the connection before answering"))
        else:
            self._fail(WireError("the engine closed the connection mid-response"
                                 + (f": {exc}" if exc else "")))
        if self.listener is not None:
            self.listener()

    # ----- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second response in the same exchange
            self.unasked = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.unasked:
            return
        self.headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
            self.until_eof = False
        elif lower == b"content-type":
            self.event_stream = value.startswith(b"text/event-stream")

    def on_headers_complete(self) -> None:
        if self.unasked:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim response (100 Continue): the real one follows on the same bytes
            self.interim = True
            self.headers.clear()
            self.until_eof = True
            self.event_stream = False
            return
        if not 200 <= status <= 599:
            self._fail(WireError(f"malformed HTTP response: status {status} is not 200..599"))
            self.abort()
            return
        self.status = status
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.unasked:
            return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.unasked or self.error is not None:
            return
        if self.interim:
            self.interim = False
            return
        self.keep_alive = self.parser.should_keep_alive()  # only meaningful inside the callback
        self.complete = True
        self._wake()

    # ----- for the client ------------------------------------------------------------------------

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, error: WireError) -> None:
        if self.error is None:
            self.error = error
        w = self.waiter
        if w is not None and not w.done():
            w.set_exception(error)

    async def wait(self, timeout_s: float, what: str) -> None:
        """Until the parser has news (head, body, end) or `timeout_s` passes with none."""
        if self.error is not None:
            raise self.error
        self.waiter = w = self.loop.create_future()
        timer = self.loop.call_later(timeout_s, _expire, w, what, timeout_s)
        try:
            await w
        finally:
            timer.cancel()
            self.waiter = None

    def take_chunk(self) -> bytes | None:
        if not self.chunks:
            return None
        chunk = self.chunks.popleft()
        self.buffered -= len(chunk)
        if self.paused and self.buffered < LOW_WATER and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk

    def reusable(self) -> bool:
        return (self.complete and self.keep_alive and not self.closed and not self.unasked and self.error is None
                and not self.chunks)

    def abort(self) -> None:
        self.closed = True
        if self.deadline_timer is not None:
            self.deadline_timer.cancel()
            self.deadline_timer = None
        if self.transport is not None:
            self.transport.abort()


def _expire(w: asyncio.Future[None], what: str, timeout_s: float) -> None:
    if not w.done():
        w.set_exception(WireTimeout(f"no {what} within {timeout_s:g} s"))


class Response:
    """An engine's answer: status and headers now, the body as it arrives; `close()` always (returns the
    connection to the pool when the body was read to the end, else closes it)."""

    def __init__(self, conn: _Conn, release: Callable[[_Conn], None], read_timeout_s: float) -> None:
        self._conn = conn
        self._release = release
        self._timeout = read_timeout_s
        self.status = conn.status
        self.headers = conn.headers
        self._closed = False

    def header(self, name: bytes) -> bytes:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return b""

    async def iter_body(self) -> AsyncIterator[bytes]:
        while (chunk := await self.read_chunk()) is not None:
            yield chunk

    async def read_chunk(self) -> bytes | None:
        """The next body bytes as they arrive; None at the end (iter_body without an async generator's upkeep)."""
        conn = self._conn
        while True:
            chunk = conn.take_chunk()
            if chunk is not None:
                return chunk
            if conn.complete:
                return None
            await conn.wait(self._timeout, "bytes from the engine")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._conn.reusable():
            self._release(self._conn)
        else:
            self._conn.abort()


class _Origin:
    """Where an upstream URL points: host, port, TLS or not, the Host header, a path prefix."""

    __slots__ = ("host", "key", "netloc", "port", "prefix", "tls")

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConnectFailed(f"unsupported upstream URL {base_url!r} (http:// or https:// with a host)")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.netloc = parts.netloc.encode("latin-1")
        self.prefix = parts.path.rstrip("/")
        self.key = (self.host, self.port, self.tls)  # its pool of idle connections


ARRIVING, WHOLE, ELSE = 0, 1, 2  # WireClient.news


class Sent:
    """A request written on a pooled connection whose answer is still to come (WireClient.send_now)."""

    __slots__ = ("conn", "data", "key", "origin", "read_timeout_s")

    def __init__(self, origin: _Origin, key: tuple[str, int, bool], data: bytes, conn: _Conn,
                 read_timeout_s: float | None) -> None:
        self.origin, self.key, self.data, self.conn, self.read_timeout_s = origin, key, data, conn, read_timeout_s


class WireClient:
    """Pools of keep-alive connections per engine origin (https upstreams verified with `ssl_context`)."""

    def __init__(self, *, connect_timeout_s: float, read_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic, ssl_context: ssl.SSLContext | None = None) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.clock = clock
        self._ssl = ssl_context
        self._idle: dict[tuple[str, int, bool], list[_Conn]] = {}
        self._origins: dict[str, _Origin] = {}

    def _origin(self, base_url: str) -> _Origin:
        found = self._origins.get(base_url)
        if found is None:
            found = self._origins[base_url] = _Origin(base_url)
        return found

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _connect(self, o: _Origin, timeout_s: float | None = None) -> _Conn:
        loop = asyncio.get_running_loop()
        host, port = o.host, o.port
        timeout = self.connect_timeout_s if timeout_s is None else timeout_s
        made: list[_Conn] = []

        def protocol() -> _Conn:
            made.append(_Conn(loop))
            return made[-1]

        # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the connection and drops a cancel that comes
        # in the iteration the connect completes (the client's hang-up; the engine then served a request nobody
        # awaited to its end). The cancel now arrives here, and a connection made for nothing is closed.
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(protocol, host, port, ssl=self._tls() if o.tls else None,
                                                       server_hostname=host if o.tls else None)
        except asyncio.CancelledError:
            for made_conn in made:
                made_conn.abort()
            raise
        except TimeoutError:
            raise ConnectTimedOut(f"connect to {host}:{port} timed out after {timeout:g} s") from None
        except ssl.SSLError as exc:
            raise ConnectFailed(f"TLS with {host}:{port}: {exc.reason or exc}") from None
        except OSError as exc:
            raise ConnectFailed(f"connect to {host}:{port}: {exc.strerror or exc}") from None
        return conn

    def _take_idle(self, key: tuple[str, int, bool]) -> _Conn | None:
        idle = self._idle.get(key)
        now = self.clock()
        while idle:
            conn = idle.pop()
            # got_bytes: the engine said something unasked (a 408 before closing): never reuse that one
            if not (conn.closed or conn.got_bytes or conn.unasked) and now - conn.idle_since < IDLE_EXPIRY_S:
                return conn
            conn.abort()
        return None

    def _put_idle(self, key: tuple[str, int, bool], conn: _Conn) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) >= MAX_IDLE_PER_ORIGIN:
            conn.abort()
            return
        conn.idle_since = self.clock()
        conn.listener = None
        conn._reset()
        idle.append(conn)

    async def post(self, base_url: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> Response:
        """Send POST base_url+path; return once the engine's status line and headers are in."""
        return await self.send(b"POST", base_url, path, body, headers)

    async def send(self, method: bytes, base_url: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]],
                   *, connect_timeout_s: float | None = None, read_timeout_s: float | None = None) -> Response:
        """Send `method` base_url+path (`headers` without host or content-length; a GET without a body sends no
        content-length); return once the status line and headers are in. The timeouts default to the client's."""
        o = self._origin(base_url)
        key = o.key
        data = self._request(o, method, path, body, headers)
        return await self._exchange(o, key, data, self._take_idle(key), False, read_timeout_s, connect_timeout_s)

    def send_now(self, method: bytes, base_url: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]],
                 *, read_timeout_s: float | None = None) -> Sent | None:
        """`send`'s request written at once on an idle pooled connection, its answer left to `answer`; None when
        no connection is idle (then `send` connects). The proxy forwards a request in the callback that read it."""
        o = self._origin(base_url)
        key = o.key
        conn = self._take_idle(key)
        if conn is None or conn.transport is None:
            return None
        data = self._request(o, method, path, body, headers)
        conn.transport.write(data)
        return Sent(o, key, data, conn, read_timeout_s)

    async def answer(self, sent: Sent, *, connect_timeout_s: float | None = None) -> Response:
        """The answer to a request `send_now` wrote: as `send` returns it (sent again on a fresh connection when the
        pooled one turns out dropped)."""
        return await self._exchange(sent.origin, sent.key, sent.data, sent.conn, True, sent.read_timeout_s,
                                    connect_timeout_s)

    def listen(self, sent: Sent, news: Callable[[], None]) -> None:
        """news() after every read on `sent`'s connection, at its close, and once the read timeout passes with no
        answer (the connection then carries the WireTimeout `answer` raises). Until `unlisten`.

        The timeout is a deadline on the connection, checked by one timer per connection that looks again when it
        fires early (a timer per request was 5% of the router's CPU in py-spy at 1,000 requests/s)."""
        conn = sent.conn
        conn.listener = news
        conn.timeout_s = self.read_timeout_s if sent.read_timeout_s is None else sent.read_timeout_s
        conn.deadline = conn.loop.time() + conn.timeout_s
        if conn.deadline_timer is None:
            conn.deadline_timer = conn.loop.call_at(conn.deadline, self._check_deadline, conn)

    def _check_deadline(self, conn: _Conn) -> None:
        conn.deadline_timer = None
        if conn.listener is None or conn.closed:
            return  # nothing waits on it now: the next listen arms it again
        if conn.loop.time() < conn.deadline:
            conn.deadline_timer = conn.loop.call_at(conn.deadline, self._check_deadline, conn)
            return
        conn._fail(WireTimeout(f"no response from the engine within {conn.timeout_s:g} s"))
        conn.listener()

    @staticmethod
    def unlisten(sent: Sent) -> None:
        sent.conn.listener = None

    @staticmethod
    def news(sent: Sent) -> int:
        """Where the answer to `sent` stands after a read: ARRIVING (a plain answer still coming in whole; the read
        timeout starts afresh, as each read does for `answer`), WHOLE (all of it in hand, nothing wrong, not an event
        stream: `take_whole`), or ELSE (an event stream, back-pressure, an error, a close: `answer` goes on from
        here)."""
        conn = sent.conn
        if conn.error is None:
            if conn.complete:
                if conn.head_done and not conn.event_stream:
                    return WHOLE
            elif not conn.paused and not (conn.head_done and conn.event_stream):
                conn.deadline = conn.loop.time() + conn.timeout_s
                return ARRIVING
        return ELSE

    @staticmethod
    def take_whole(sent: Sent) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The WHOLE answer to `sent`: its status, headers and body (then `settle` the connection)."""
        conn = sent.conn
        chunks = conn.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        conn.buffered = 0
        return conn.status, conn.headers, body

    def settle(self, sent: Sent) -> None:
        """`sent`'s connection back to the pool once its answer is taken, or closed when it cannot serve again."""
        conn = sent.conn
        if conn.reusable():
            self._put_idle(sent.key, conn)
        else:
            conn.abort()

    @staticmethod
    def abandon(sent: Sent) -> None:
        """The client left: close the connection, so that the engine sees the disconnect."""
        WireClient.unlisten(sent)
        sent.conn.abort()

    @staticmethod
    def _request(o: _Origin, method: bytes, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
        head = [method, b" ", (o.prefix + path).encode("latin-1"), b" HTTP/1.1\r\nhost: ", o.netloc, b"\r\n"]
        if body or method != b"GET":
            head += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        for k, v in headers:
            head += (k, b": ", v, b"\r\n")
        head += (b"\r\n", body)
        return b"".join(head)

    async def _exchange(self, o: _Origin, key: tuple[str, int, bool], data: bytes, conn: _Conn | None,
                        written: bool, read_timeout_s: float | None, connect_timeout_s: float | None) -> Response:
        """`data` on `conn` (a pooled one, or a fresh one when None; already written when `written`) until the
        response head is in."""
        read_timeout = self.read_timeout_s if read_timeout_s is None else read_timeout_s
        while True:
            reused = conn is not None
            if conn is None:
                conn = await self._connect(o, connect_timeout_s)
            try:
                assert conn.transport is not None
                if not written:
                    conn.transport.write(data)
                written = False  # a request sent again goes on a fresh connection
                while not conn.head_done:
                    await conn.wait(read_timeout, "response from the engine")
            except _Stale:
                conn.abort()
                if not reused:
                    raise WireError("the engine closed the connection before answering") from None
                # A pooled connection the engine had dropped (keep-alive timeout, restart): the others are
                # likely gone too, so send again on a fresh one.
                self._drop_idle(key)
                conn = None
                continue
            except BaseException:
                conn.abort()
                raise
            return Response(conn, lambda c: self._put_idle(key, c), read_timeout)

    def _drop_idle(self, key: tuple[str, int, bool]) -> None:
        for conn in self._idle.pop(key, []):
            conn.abort()

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.abort()
        self._idle.clear()
