"""Serving a Router on its lean HTTP/1.1 server (router/lean.py; uvicorn when `http_server = "uvicorn"`): in the
foreground (the CLI) or from a background thread (tests, demo, bench)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import uvicorn

from router.app import Router
from router.config import RouterConfig
from router.guard import guarded_protocol
from router.lean import LeanServer
from router.listen import tls_options


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture when run off the main thread."""

    def __init__(self, config: uvicorn.Config, capture: bool) -> None:
        super().__init__(config)
        self._capture = capture

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        if self._capture:
            return super().capture_signals()
        return contextlib.nullcontext()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` on uvloop when it is installed (about a third less CPU per proxied request), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without it each
    # response's body waits ~40 ms for the client's delayed ACK of the headers (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def uvicorn_config(router: Router) -> uvicorn.Config:
    """uvicorn for the router: the guarded HTTP protocol (size limits, smuggling shapes refused), TLS when set."""
    cfg = router.config
    return uvicorn.Config(router, log_config=None, access_log=False, lifespan="off", timeout_keep_alive=30,
                          timeout_graceful_shutdown=3,
                          http=guarded_protocol(max_header_bytes=cfg.max_header_bytes),
                          **tls_options(cfg.tls_cert_file or None, cfg.tls_key_file or None))


class _Lean(LeanServer):
    """The lean server, with SIGINT/SIGTERM setting should_exit when run in the foreground."""

    def __init__(self, router: Router, capture: bool) -> None:
        cfg = router.config
        ctx = None
        if tls_options(cfg.tls_cert_file or None, cfg.tls_key_file or None):
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
        super().__init__(router, max_header_bytes=cfg.max_header_bytes, ssl_context=ctx)
        self._capture = capture

    async def serve(self, sockets: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        if self._capture:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._exit)
        try:
            await super().serve(sockets)
        finally:
            if self._capture:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)

    def _exit(self) -> None:
        self.should_exit = True


AnyServer = _Server | _Lean


async def serve(router: Router, sock: socket.socket, *, capture_signals: bool = True,
                on_ready: Callable[[AnyServer], None] | None = None) -> None:
    """Start the router's health checks, serve on `sock` until told to stop, then close."""
    server: AnyServer
    if router.config.http_server == "uvicorn":
        server = _Server(uvicorn_config(router), capture_signals)
    else:
        server = _Lean(router, capture_signals)
    await router.start()
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if on_ready is not None:
            on_ready(server)
        await task
    finally:
        await router.close()


class RouterThread:
    """A router on 127.0.0.1 (a free port unless config.port is set) served from a background thread."""

    def __init__(self, config: RouterConfig, *, clock: Callable[[], float] = time.time, token: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.config = config
        self.router_kwargs: dict[str, Any] = {"clock": clock, "token": token, "env": env}
        self.router: Router | None = None
        self.url = ""
        self._server: AnyServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="router")

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self.router = Router(self.config, **self.router_kwargs)
            sock = bind(self.config.host, self.config.port)
            host, port = sock.getsockname()[:2]
            self.url = f"{'https' if self.config.tls_cert_file else 'http'}://{host}:{port}"

            def ready(server: AnyServer) -> None:
                self._server = server
                self._ready.set()

            await serve(self.router, sock, capture_signals=False, on_ready=ready)

        try:
            run_loop(main())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
        finally:
            self._ready.set()

    def start(self, timeout: float = 30.0) -> RouterThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("router did not start in time")
        if self._error is not None:
            raise RuntimeError(f"router failed to start: {self._error}") from self._error
        return self

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the router's event loop and return its result (for tests)."""
        assert self._loop is not None
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            try:
                box.append(fn())
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)
        return box[0] if box else None

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(15)


@contextlib.contextmanager
def router_thread(config: RouterConfig, **kwargs: Any) -> Iterator[RouterThread]:
    rt = RouterThread(config, **kwargs).start()
    try:
        yield rt
    finally:
        rt.stop()
