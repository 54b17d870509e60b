"""The daemon's GETs over router.wire behind httpx's transport interface: the same answers, errors and decoding a
caller of httpx gets, connections kept across clients, anything but a GET through httpx's own transport."""

from __future__ import annotations

import asyncio
import gzip

import httpx
import pytest

from doctor.wire_transport import KeptTransport, WireTransport
from tests.router.test_wire import Engine, read_request


def answer(body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


def test_gets_share_one_connection_across_clients_and_other_methods_go_to_httpx() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            request = await read_request(reader)
            seen.append(request)
            writer.write(answer(b"conn %d %s" % (n, request.split(b" ")[0])))
            await writer.drain()

    async def main() -> tuple[list[str], int]:
        async with Engine(handler) as engine:
            kept = KeptTransport()
            texts = []
            for _ in range(3):  # one client per cycle, as the daemon's cycles build them
                async with httpx.AsyncClient(transport=kept, timeout=5) as c:
                    r = await c.get(engine.url + "/metrics?x=1", headers={"authorization": "Bearer t"})
                    texts.append(r.text)
                    assert r.headers["content-type"].startswith("text/plain")
            async with httpx.AsyncClient(transport=kept, timeout=5) as c:
                texts.append((await c.post(engine.url + "/sleep", json={"level": 1})).text)
            await kept.close()
            return texts, engine.connections

    texts, connections = asyncio.run(main())
    assert texts[:3] == ["conn 1 GET"] * 3
    assert texts[3].endswith("POST") and not texts[3].startswith("conn 1 ")  # httpx's own pool, its own connection
    assert connections == 2
    first = seen[0].split(b"\r\n")
    assert first[0] == b"GET /metrics?x=1 HTTP/1.1"
    names = [line.split(b":")[0].lower() for line in first[1:] if line]
    assert names.count(b"host") == 1 and b"authorization" in names and b"content-length" not in names
    assert b'{"level":1}' in seen[3] or b'{"level": 1}' in seen[3]


def test_a_gzipped_body_is_decoded_as_httpx_decodes_it() -> None:
    text = b"vllm:num_requests_running 3.0\n" * 200

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(answer(gzip.compress(text), b"content-encoding: gzip\r\n"))
        await writer.drain()

    async def main() -> str:
        async with Engine(handler) as engine:
            transport = WireTransport(httpx.AsyncHTTPTransport())
            async with httpx.AsyncClient(transport=transport, timeout=5) as c:
                body = (await c.get(engine.url + "/metrics")).text
            await transport.close()
            return body

    assert asyncio.run(main()) == text.decode()


@pytest.mark.parametrize("fault, error", [
    ("refused", httpx.ConnectError),
    ("silent", httpx.ReadTimeout),
    ("cut", httpx.RemoteProtocolError),
    ("garbage", httpx.RemoteProtocolError),
])
def test_failures_are_the_httpx_errors_callers_handle(fault: str, error: type[Exception]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if fault == "silent":
            await asyncio.sleep(30)
        elif fault == "cut":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort")
            await writer.drain()
        else:
            writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
            await writer.drain()

    async def main() -> None:
        async with Engine(handler) as engine:
            url = engine.url
            if fault == "refused":
                assert engine.server is not None
                engine.server.close()
                await engine.server.wait_closed()
            transport = WireTransport(httpx.AsyncHTTPTransport())
            async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(0.5)) as c:
                with pytest.raises(error) as caught:
                    r = await c.get(url + "/metrics")
                    r.raise_for_status()
            assert str(caught.value)  # a reason the report can show
            await transport.close()

    asyncio.run(main())


def test_a_connection_the_engine_closed_while_idle_is_dialled_again() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(answer(b"conn %d" % n))
        await writer.drain()
        # then close, as uvicorn does after its keep-alive time-out

    async def main() -> list[str]:
        async with Engine(handler) as engine:
            transport = WireTransport(httpx.AsyncHTTPTransport())
            out = []
            async with httpx.AsyncClient(transport=transport, timeout=5) as c:
                for _ in range(3):
                    out.append((await c.get(engine.url + "/health")).text)
                    await asyncio.sleep(0.05)
            await transport.close()
            return out

    assert asyncio.run(main()) == ["conn 1", "conn 2", "conn 3"]
