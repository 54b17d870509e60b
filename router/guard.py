"""Listener hardening shared by the router and the daemon (uvicorn's httptools protocol, guarded; the router's own
server, router/lean.py, applies the same rules with `framing_problem` and `Refused`).

Before a request reaches the app:
- headers (request line included) over `max_header_bytes`: 431 with the limit, and the connection closed;
- request smuggling shapes: both Content-Length and Transfer-Encoding, several Content-Length headers, a
  Transfer-Encoding other than exactly `chunked`, obs-fold (continuation) header lines, invalid chunk sizes
  and any other malformed framing: 400 with the parser's reason, and the connection closed (never reused).
Every refusal is answered `Connection: close` and the socket is closed after it. Bodies are bounded by the
endpoints that read them (413 with the limit: the router's proxy and policy API, the daemon's alerts and decisions);
no other endpoint reads a body.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("router.guard")
DEFAULT_MAX_HEADER_BYTES = 32 * 1024
_REASONS = {400: "Bad Request", 431: "Request Header Fields Too Large"}


class Refused(Exception):
    """A request refused before the app sees it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def framing_problem(headers: list[tuple[bytes, bytes]]) -> Refused | None:
    """The refusal for a request's framing headers (lower-cased names), None when they are sound."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    for n, v in headers:  # one pass (every request's head comes through here)
        if n == b"content-length":
            lengths.append(v)
        elif n == b"transfer-encoding":
            codings.append(v)
    if lengths and codings:
        return Refused(400, "both Content-Length and Transfer-Encoding are given (a request smuggling shape)")
    if len(lengths) > 1:
        return Refused(400, "Content-Length is given more than once (a request smuggling shape)")
    if len(codings) > 1 or (codings and codings[0].strip().lower() != b"chunked"):
        shown = b", ".join(codings).decode("latin-1")[:100]
        return Refused(400, f"Transfer-Encoding {shown!r} is not supported: only 'chunked'")
    if lengths:
        value = lengths[0].strip()
        if not value.isdigit():
            return Refused(400, f"Content-Length {value.decode('latin-1')[:40]!r} is not a number")
    return None


class HeaderBudget:
    """Counts a request head's bytes against `max_header_bytes`: over it, a 431 naming the limit. Shared by the
    guarded uvicorn protocol and router/lean.py's server."""

    max_header_bytes: int
    _head: int

    def _count(self, size: int) -> None:
        self._head += size
        if self._head > self.max_header_bytes:
            raise self._too_large()

    def _too_large(self) -> Refused:
        return Refused(431, f"the request's headers are over this server's limit of {self.max_header_bytes} bytes")


class GuardedHttpTools(HeaderBudget, HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits and refusals above (subclass with guarded_protocol)."""

    max_header_bytes = DEFAULT_MAX_HEADER_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head, self._head, self._raw = True, 0, 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head, self._raw = True, 0, 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url) + 16)  # the method and version
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        problem = framing_problem(self.headers)
        if problem is not None:
            raise problem
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, Refused):
                self._refuse(cause)
            else:
                self._refuse(Refused(400, f"malformed HTTP request: {exc}"))
            return
        # a header line still arriving: httptools buffers it whole, so bound the bytes of an unfinished head too
        # (counted after feeding: a new message's start resets the count)
        if self._in_head:
            self._raw += len(data)
            if self._raw > 2 * self.max_header_bytes + 65536:
                self._refuse(self._too_large())

    def _refuse(self, exc: Refused) -> None:
        log.warning("refused a request from %s: %d %s", f"{self.client[0]}:{self.client[1]}" if self.client else "?",
                    exc.status, exc.reason)
        body = json.dumps({"error": {"message": exc.reason, "type": _REASONS[exc.status].replace(" ", ""),
                                     "code": exc.status}}).encode()
        head = [f"HTTP/1.1 {exc.status} {_REASONS[exc.status]}".encode(), b"content-type: application/json",
                f"content-length: {len(body)}".encode(), b"connection: close"]
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app reading this body sees the client gone, and writes nothing more
            cycle.message_event.set()
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()


def guarded_protocol(*, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> type[GuardedHttpTools]:
    """A protocol class for uvicorn.Config(http=...) with this header limit."""
    return type("GuardedHttp", (GuardedHttpTools,), {"max_header_bytes": max_header_bytes})
