"""httpx's transport interface over router.wire's keep-alive HTTP/1.1 client, for the daemon's reads.

The daemon reads every engine's /metrics (and /health, the router's /metrics) each second for as long as it
runs, so what one read costs is most of what the daemon costs. Measured on a sim engine's 48 KB /metrics over a
kept connection (CPU per GET, /work/prof/http_cost.py, one run): httpx 2.1 ms (httpcore's h11 events, anyio
locks and cancel scopes), a bare asyncio GET 0.27 ms. This transport sends GETs through `router.wire` (httptools,
the C parser uvicorn uses; fuzzed with the router) and hands everything else (POST, PUT, HEAD, a GET with a body)
to httpx's own transport, so callers keep httpx's API, its exceptions and its content decoding.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import httpx

from doctor.reading import tls_context
from router.wire import ConnectFailed, ConnectTimedOut, Response, WireClient, WireError, WireTimeout

_SKIPPED = {b"host", b"content-length", b"transfer-encoding"}


class _Body(httpx.AsyncByteStream):
    """A wire response's body as httpx reads it; its close returns the connection to the pool."""

    def __init__(self, response: Response, request: httpx.Request) -> None:
        self.response = response
        self.request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.iter_body():
                yield chunk
        except WireError as exc:
            raise _as_httpx(exc, self.request) from None

    async def aclose(self) -> None:
        self.response.close()


def _as_httpx(exc: WireError, request: httpx.Request) -> httpx.TransportError:
    """The httpx exception a caller of httpx would have seen for the same failure."""
    if isinstance(exc, ConnectTimedOut):
        return httpx.ConnectTimeout(str(exc), request=request)
    if isinstance(exc, ConnectFailed):
        return httpx.ConnectError(str(exc), request=request)
    if isinstance(exc, WireTimeout):
        return httpx.ReadTimeout(str(exc), request=request)
    return httpx.RemoteProtocolError(str(exc), request=request)


class WireTransport(httpx.AsyncBaseTransport):
    """GETs over kept connections of `router.wire`; any other request through `fallback`. Connections outlive the
    clients built on it (a client's close closes nothing); the owner calls `close()`."""

    def __init__(self, fallback: httpx.AsyncBaseTransport, ssl_context: ssl.SSLContext | None = None,
                 timeout_s: float = 5.0) -> None:
        self.fallback = fallback
        self.timeout_s = timeout_s
        self.wire = WireClient(connect_timeout_s=timeout_s, read_timeout_s=timeout_s, ssl_context=ssl_context)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if request.method != "GET" or url.scheme not in ("http", "https") or not _bodiless(request):
            return await self.fallback.handle_async_request(request)
        timeouts = request.extensions.get("timeout") or {}
        connect, read = (_seconds(timeouts, k, self.timeout_s) for k in ("connect", "read"))
        headers = [(k, v) for k, v in request.headers.raw if k.lower() not in _SKIPPED]
        try:
            response = await self.wire.send(
                b"GET", f"{url.scheme}://{url.netloc.decode('ascii')}", url.raw_path.decode("ascii"), b"", headers,
                connect_timeout_s=connect, read_timeout_s=read)
        except WireError as exc:
            raise _as_httpx(exc, request) from None
        return httpx.Response(response.status, headers=response.headers, stream=_Body(response, request),
                              extensions={"http_version": b"HTTP/1.1"})

    async def aclose(self) -> None:
        """A client's close: the connections stay open for the next cycle."""

    async def close(self) -> None:
        self.wire.close()
        await self.fallback.aclose()


def _seconds(timeouts: dict[str, float | None], key: str, default: float) -> float:
    """httpx's timeout for `key`: missing means the transport's default, None means none (a day here)."""
    if key not in timeouts:
        return default
    value = timeouts[key]
    return 86400.0 if value is None else value


def _bodiless(request: httpx.Request) -> bool:
    try:
        return not request.content
    except httpx.RequestNotRead:
        return False


class KeptTransport(WireTransport):
    """A transport whose connections outlive the clients built on it, for a long-lived caller (the daemon): each
    cycle's client closes only its view, so the next cycle reuses the open connections instead of dialling (and,
    for https, handshaking) again. GETs go over `router.wire` (doctor.wire_transport: a tenth of httpx's CPU per
    read), the rest through httpx's own transport. The owner closes it with `close()`."""

    def __init__(self, max_connections: int = 64) -> None:
        super().__init__(httpx.AsyncHTTPTransport(verify=tls_context(), limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections)), ssl_context=tls_context())
