"""A real loopback HTTP server answering a crafted /metrics (and an OK /health), for bad-input tests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def metrics_server(body: Callable[[int], str]) -> Iterator[str]:
    """Serve `body(n)` as the n-th /metrics answer (n from 0) on 127.0.0.1; yield the base URL."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    calls = [0]

    async def metrics(request: Request) -> PlainTextResponse:
        n = calls[0]
        calls[0] += 1
        return PlainTextResponse(body(n), media_type="text/plain; version=0.0.4")

    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("")

    app = Starlette(routes=[Route("/metrics", metrics), Route("/health", health)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
