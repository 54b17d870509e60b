"""The router's lean HTTP/1.1 server (router/lean.py) at its edges, in raw bytes over loopback: pipelined requests,
chunked request bodies, heads and bodies over the limits, Expect: 100-continue, HEAD, HTTP/1.0, a client that
hangs up mid-stream and an engine that cuts its stream."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from router_helpers import engine, router, wait_for

from router.config import ConfigError, config_from_dict

BODY = b'{"prompt": "tok tok", "max_tokens": 2}'


def _connect(url: str) -> socket.socket:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=20)


class Reader:
    """HTTP/1.1 responses read off a socket, one at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def _until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            if not self._fill():
                raise EOFError(self.buf[:200])
        out, _, self.buf = self.buf.partition(sep)
        return out

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError(self.buf[:200])
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head_only: bool = False) -> tuple[int, dict[bytes, bytes], bytes]:
        head = self._until(b"\r\n\r\n").split(b"\r\n")
        status = int(head[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in head[1:])}
        if head_only or status in (100, 204, 304):
            return status, headers, b""
        if b"content-length" in headers:
            return status, headers, self._exactly(int(headers[b"content-length"]))
        if headers.get(b"transfer-encoding") == b"chunked":
            body = b""
            while True:
                size = int(self._until(b"\r\n"), 16)
                body += self._exactly(size + 2)[:-2]
                if size == 0:
                    return status, headers, body
        while self._fill():
            pass
        body, self.buf = self.buf, b""
        return status, headers, body

    def closed(self) -> bool:
        self.sock.settimeout(5)
        try:
            return not self._fill()
        except (ConnectionResetError, TimeoutError):
            return True


def _post(path: bytes, body: bytes, *extra: bytes) -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n" + b"".join(h + b"\r\n" for h in extra) + b"\r\n" + body)


def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        with _connect(rt.url) as sock:
            long_body = b'{"prompt": "' + b"tok " * 1500 + b'", "max_tokens": 2}'
            sock.sendall(_post(b"/v1/completions", long_body) + b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
                         + _post(b"/v1/completions", BODY))
            r = Reader(sock)
            first, second, third = r.response(), r.response(), r.response()
        assert first[0] == 200 and b'"cold-m"' in first[2]
        assert second[0] == 200 and b'"status"' in second[2]
        assert third[0] == 200 and b'"hot-m"' in third[2]


def test_a_chunked_request_body_sent_in_pieces_is_proxied() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        with _connect(rt.url) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
            for piece in (BODY[:7], BODY[7:20], BODY[20:]):
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                time.sleep(0.05)
            sock.sendall(b"0\r\n\r\n")
            status, _, body = Reader(sock).response()
        assert status == 200 and b'"hot-m"' in body


def test_bodies_and_heads_over_the_limits_and_the_connection_after_them() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, \
            router(hot.url, cold.url, max_body_bytes=4096, max_header_bytes=2048) as rt:
        with _connect(rt.url) as sock:  # over the body limit: 413, then the same connection serves on
            sock.sendall(_post(b"/v1/completions", b" " * 20000))
            r = Reader(sock)
            status, _, body = r.response()
            assert status == 413 and b"4096" in body
            sock.sendall(_post(b"/v1/completions", BODY))
            assert r.response()[0] == 200
        with _connect(rt.url) as sock:  # a chunked body over the limit
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                         + b"1000\r\n" + b" " * 4096 + b"\r\n" + b"10\r\n" + b" " * 16 + b"\r\n0\r\n\r\n")
            assert Reader(sock).response()[0] == 413
        with _connect(rt.url) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 4000 + b"\r\n\r\n")
            r = Reader(sock)
            status, headers, body = r.response()
            assert status == 431 and b"2048" in body and headers[b"connection"] == b"close" and r.closed()
        with _connect(rt.url) as sock:  # a sound request, then garbage: the first is answered, then 400 and close
            sock.sendall(_post(b"/v1/completions", BODY) + b"NOT HTTP AT ALL\r\n\r\n")
            r = Reader(sock)
            assert r.response()[0] == 200
            status, headers, _ = r.response()
            assert status == 400 and headers[b"connection"] == b"close" and r.closed()
        assert httpx.get(rt.url + "/health").status_code == 200


def test_expect_continue_head_and_http_1_0() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        with _connect(rt.url) as sock:
            head = _post(b"/v1/completions", BODY, b"expect: 100-continue")
            sock.sendall(head[:-len(BODY)])
            r = Reader(sock)
            assert r.response()[0] == 100  # the client may send its body now
            sock.sendall(BODY)
            assert r.response()[0] == 200
            sock.sendall(b"HEAD /health HTTP/1.1\r\nhost: x\r\n\r\n")
            status, headers, _ = r.response(head_only=True)
            assert status == 200 and int(headers[b"content-length"]) > 0
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")  # HEAD sent no body: this parses cleanly
            assert r.response()[0] == 200
        with _connect(rt.url) as sock:  # refused before the body was asked for: the connection closes after it
            sock.sendall(_post(b"/v1/completions", b" " * (11 << 20), b"expect: 100-continue")[:-(11 << 20)])
            r = Reader(sock)
            status, headers, _ = r.response()
            assert status == 413 and headers[b"connection"] == b"close" and r.closed()
        with _connect(rt.url) as sock:  # an upgrade it does not take: answered over HTTP/1.1, then closed
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\n"
                         b"upgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
            r = Reader(sock)
            assert r.response()[0] == 200 and r.closed()
        with _connect(rt.url) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.0\r\ncontent-length: " + str(len(BODY)).encode()
                         + b"\r\n\r\n" + BODY)
            r = Reader(sock)
            status, _, body = r.response()
            assert status == 200 and b'"hot-m"' in body and r.closed()


def test_a_client_hanging_up_mid_stream_frees_the_slot() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        with _connect(rt.url) as sock:
            sock.sendall(_post(b"/v1/completions", b'{"prompt": "go", "max_tokens": 5000, "ignore_eos": true, '
                               b'"stream": true}'))
            r = Reader(sock)
            while r.buf.count(b"data:") < 3:
                assert r._fill()
        wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 0, what="slot freed")
        metrics = httpx.get(rt.url + "/metrics").text
        assert 'router_requests_total{endpoint="/v1/completions",route="hot",status="499"} 1.0' in metrics


class _CutHandler(BaseHTTPRequestHandler):
    """An engine that streams one event and then drops the connection."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        event = b'data: {"choices": [{"index": 0, "text": " hi"}]}\n\n'
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _cutting_engine() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CutHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_engine_cutting_its_stream_ends_it_with_an_error_event_and_the_connection_serves_on() -> None:
    with _cutting_engine() as url, router(url, url) as rt:
        with _connect(rt.url) as sock:
            sock.sendall(_post(b"/v1/completions", b'{"prompt": "go", "stream": true}'))
            r = Reader(sock)
            status, headers, body = r.response()
            assert status == 200 and headers[b"content-type"].startswith(b"text/event-stream")
            assert headers[b"transfer-encoding"] == b"chunked"  # framed: the client knows where it ends
            assert body.count(b"data:") == 2 and b'" hi"' in body
            assert b"BadGateway" in body and b"mid-stream" in body
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            assert r.response()[0] == 200
        metrics = httpx.get(rt.url + "/metrics").text
        assert 'router_upstream_errors_total{kind="protocol",upstream="hot"} 1.0' in metrics


def test_http_server_uvicorn_still_serves_and_an_unknown_server_is_refused() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url, http_server="uvicorn") as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        r = c.post("/v1/completions", json={"prompt": "tok tok", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "hot-m"
    with pytest.raises(ConfigError, match="http_server: 'h2o' is not one of lean, uvicorn"):
        config_from_dict({"router": {"http_server": "h2o"}})
