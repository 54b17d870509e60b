"""A real HTTP receiver on loopback (Starlette + uvicorn in a thread) that records every POST.

Tests set `status` (the answer) or `hold()` (requests wait, unanswered, until `release()` or the end).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass(frozen=True)
class Post:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Records POSTs to any path; answers `status` (with `headers`), or holds them while `hold()` is on."""

    def __init__(self) -> None:
        self.posts: list[Post] = []
        self.status = 200
        self.headers: dict[str, str] = {}
        self.url = ""
        self._cond = threading.Condition()
        self._open = threading.Event()
        self._open.set()

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        with self._cond:
            self.posts.append(Post(request.url.path, {k.lower(): v for k, v in request.headers.items()}, body))
            self._cond.notify_all()
        if not self._open.is_set():
            await asyncio.to_thread(self._open.wait)
        return Response("ok" if self.status < 300 else "no", status_code=self.status, headers=self.headers)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[Post]:
        """The first `count` posts, waiting up to `timeout_s` for them (AssertionError when they do not come)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.posts) >= count, timeout=timeout_s):
                raise AssertionError(f"expected {count} posts within {timeout_s:g}s, got {len(self.posts)}")
            return list(self.posts[:count])


@contextlib.contextmanager
def receiver() -> Iterator[Receiver]:
    """A Receiver listening on 127.0.0.1 (port 0), stopped at the end."""
    rec = Receiver()
    app = Starlette(routes=[Route("/{path:path}", rec._handle, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    rec.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.01)
    try:
        yield rec
    finally:
        rec.release()
        server.should_exit = True
        thread.join(10)
        sock.close()
