"""The proxy's keep-alive HTTP/1.1 client against real loopback servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from router.wire import ConnectFailed, WireClient, WireError, WireTimeout

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Engine:
    """A TCP server on loopback; `handler(reader, writer, connection_number)` plays the engine."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.closed_by_peer: list[int] = []
        self.url = ""
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Engine:
        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            n = self.connections
            try:
                await self.handler(reader, writer, n)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    return head + await reader.readexactly(length)


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: " + \
        str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body


async def body_of(client: WireClient, url: str, payload: bytes = b"{}") -> tuple[int, bytes]:
    resp = await client.post(url, "/v1/completions", payload, [(b"content-type", b"application/json")])
    try:
        parts = [c async for c in resp.iter_body()]
    finally:
        resp.close()
    return resp.status, b"".join(parts)


def client(read_timeout_s: float = 5.0) -> WireClient:
    return WireClient(connect_timeout_s=2.0, read_timeout_s=read_timeout_s)


def test_sequential_requests_share_one_connection_and_send_the_body() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            req = await read_request(reader)
            seen.append(req)
            writer.write(ok(b'{"n":%d}' % len(seen)))

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client()
            for i in range(5):
                assert await body_of(c, eng.url, b'{"prompt":"p%d"}' % i) == (200, b'{"n":%d}' % (i + 1))
            assert eng.connections == 1
            c.close()

    asyncio.run(main())
    assert seen[0].startswith(b"POST /v1/completions HTTP/1.1\r\n")
    assert b"\r\ncontent-type: application/json\r\n" in seen[0]
    assert seen[3].endswith(b'{"prompt":"p3"}')


def test_an_engine_that_closed_an_idle_connection_gets_the_request_on_a_fresh_one() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok(b"first" if n == 1 else b"again"))
        await writer.drain()
        # then close without saying so (as a keep-alive timeout does)

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client()
            assert await body_of(c, eng.url) == (200, b"first")
            await asyncio.sleep(0.05)
            assert await body_of(c, eng.url) == (200, b"again")
            assert eng.connections == 2
            c.close()

    asyncio.run(main())


def test_chunked_and_until_close_bodies_are_read_whole() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for part in (b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
        await writer.drain()

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client()
            resp = await c.post(eng.url, "/v1/completions", b"{}", [])
            assert resp.header(b"content-type") == b"text/event-stream"
            chunks = [x async for x in resp.iter_body()]
            resp.close()
            assert b"".join(chunks) == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
            assert len(chunks) >= 2  # passed on as they came, not gathered
            assert await body_of(c, eng.url) == (200, b"until the end")
            c.close()

    asyncio.run(main())


def test_a_large_body_arrives_whole_while_the_reader_is_slow() -> None:
    big = bytes(range(256)) * (6 * 4096)  # 6 MiB: above the high-water mark, so reading pauses and resumes

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok(big))
        await writer.drain()

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client()
            resp = await c.post(eng.url, "/x", b"", [])
            got = bytearray()
            most = 0
            async for chunk in resp.iter_body():
                got += chunk
                most = max(most, resp._conn.buffered)
                await asyncio.sleep(0)
            resp.close()
            assert bytes(got) == big
            assert most <= 2 * (1 << 20)  # bounded by the high-water mark plus one read
            c.close()

    asyncio.run(main())


@pytest.mark.parametrize("behaviour, error, words", [
    ("hang", WireTimeout, "no response from the engine within 0.3 s"),
    ("garbage", WireError, "malformed HTTP response"),
    ("cut", WireError, "closed the connection mid-response"),
    ("slam", WireError, "closed the connection before answering"),
])
def test_engine_failures_are_named(behaviour: str, error: type[Exception], words: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if behaviour == "hang":
            await asyncio.sleep(5)
        elif behaviour == "garbage":
            writer.write(b"SPDY/9 banana\r\n\r\n")
        elif behaviour == "cut":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
            await writer.drain()
            await asyncio.sleep(0.05)

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client(read_timeout_s=0.3)
            with pytest.raises(error, match=re.escape(words)):
                await body_of(c, eng.url)
            c.close()

    asyncio.run(main())


def test_silence_mid_body_times_out() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client(read_timeout_s=0.3)
            resp = await c.post(eng.url, "/x", b"", [])
            got = []
            with pytest.raises(WireTimeout, match=re.escape("no bytes from the engine within 0.3 s")):
                async for chunk in resp.iter_body():
                    got.append(chunk)
            resp.close()
            assert got == [b"hello"]
            c.close()

    asyncio.run(main())


def test_nobody_listening_is_a_connect_failure() -> None:
    async def main() -> None:
        async with Engine(read_request_forever) as eng:
            url = eng.url
        c = client()
        with pytest.raises(ConnectFailed, match=re.escape("connect to 127.0.0.1")):
            await c.post(url, "/x", b"", [])
        with pytest.raises(ConnectFailed, match="unsupported upstream URL"):
            await c.post("ftp://example.invalid", "/x", b"", [])

    asyncio.run(main())


async def read_request_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    while True:
        await read_request(reader)


def test_a_cancelled_request_closes_its_connection_so_the_engine_sees_the_disconnect() -> None:
    saw_eof = asyncio.Event

    async def main() -> None:
        eof = saw_eof()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
            await writer.drain()
            if await reader.read(1) == b"":
                eof.set()

        async with Engine(handler) as eng:
            c = client()

            async def consume() -> None:
                resp = await c.post(eng.url, "/x", b"", [])
                try:
                    async for _ in resp.iter_body():
                        pass
                finally:
                    resp.close()

            task = asyncio.ensure_future(consume())
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(eof.wait(), 5)
            assert not c._idle.get(("127.0.0.1", int(eng.url.rsplit(":", 1)[1])))
            c.close()

    asyncio.run(main())


def test_a_cancel_that_comes_as_the_connection_is_made_is_not_lost() -> None:
    """The client's hang-up (the request task's cancel) landing in the loop iteration the engine connection completes
    ends the request: Python 3.11's wait_for returned the connection and dropped that cancel, and the engine served a
    request nobody awaited to its end."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        real = loop.create_connection
        task: asyncio.Task[object] | None = None

        async def connect_then_cancel(*args: Any, **kwargs: Any) -> Any:
            made = await real(*args, **kwargs)
            assert task is not None
            loop.call_soon(task.cancel)  # runs before the request's task resumes with the connection
            return made

        loop.create_connection = connect_then_cancel  # type: ignore[method-assign]
        async with Engine(read_request_forever) as eng:
            c = client()
            task = asyncio.ensure_future(c.post(eng.url, "/x", b"{}", []))
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), 5)
            assert task.cancelled()
            assert not c._idle.get(("127.0.0.1", int(eng.url.rsplit(":", 1)[1])))
            c.close()

    asyncio.run(main())


def test_a_path_prefix_in_the_upstream_url_is_kept() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        seen.append(await read_request(reader))
        writer.write(ok(b"{}"))
        await writer.drain()

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client()
            assert await body_of(c, eng.url + "/team-a/") == (200, b"{}")
            c.close()

    asyncio.run(main())
    assert seen[0].startswith(b"POST /team-a/v1/completions HTTP/1.1\r\n")


CERTS = Path(__file__).parent / "data"  # a self-signed localhost certificate (CN and SAN localhost, 127.0.0.1)


def test_https_upstreams_are_spoken_to_over_tls_and_verified() -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(CERTS / "localhost-cert.pem", CERTS / "localhost-key.pem")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        try:
            while True:
                await read_request(reader)
                writer.write(ok(b'{"tls":true}'))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            writer.close()  # the client that refused the certificate hung up

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: handler(r, w, 0), "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        try:
            trusting = ssl.create_default_context(cafile=str(CERTS / "localhost-cert.pem"))
            c = WireClient(connect_timeout_s=5.0, read_timeout_s=5.0, ssl_context=trusting)
            for _ in range(2):
                assert await body_of(c, f"https://localhost:{port}") == (200, b'{"tls":true}')
            c.close()
            stranger = client()  # the system's trust store does not know the self-signed certificate
            with pytest.raises(ConnectFailed, match=re.escape(f"TLS with localhost:{port}")):
                await stranger.post(f"https://localhost:{port}", "/x", b"", [])
        finally:
            server.close()

    asyncio.run(main())


def test_a_pooled_connection_dropped_as_the_request_goes_out_is_retried_on_a_fresh_one() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok(b"conn %d" % n))
        await writer.drain()
        if n == 1:
            await read_request(reader)  # the second request on this connection: hang up without a word

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client()
            assert await body_of(c, eng.url) == (200, b"conn 1")
            assert await body_of(c, eng.url) == (200, b"conn 2")  # no error reaches the caller
            assert eng.connections == 2
            c.close()

    asyncio.run(main())


def test_a_connection_on_which_the_engine_spoke_unasked_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(ok(b"conn %d" % n))
        await writer.drain()
        if n == 1:
            writer.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(1)  # ... and the close comes later
        else:
            await read_request_forever(reader, writer, n)

    async def main() -> None:
        async with Engine(handler) as eng:
            c = client()
            assert await body_of(c, eng.url) == (200, b"conn 1")
            await asyncio.sleep(0.1)  # the 408 arrives while the connection sits in the pool
            assert await body_of(c, eng.url) == (200, b"conn 2")
            c.close()

    asyncio.run(main())
