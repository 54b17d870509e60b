"""A request Proxy.begin forwarded on a pooled engine connection is answered from that connection's callbacks when
the engine's whole answer comes in (router/flight.py), in one read or several; everything else goes to the task
path with nothing lost: a stream, an engine silent past the read timeout, a pooled connection the engine dropped, a
client that leaves, a failure while relaying."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
from router_helpers import router, wait_for
from test_forward_at_once import _counted
from test_lean_server import Reader, _connect, _post

from router.server import RouterThread

ANSWER = json.dumps({"id": "x", "object": "text_completion", "model": "scripted",
                     "choices": [{"index": 0, "text": " hi", "finish_reason": "length"}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()
BODY = b'{"prompt": "hi there", "max_tokens": 1}'


class _Scripted(BaseHTTPRequestHandler):
    """An engine whose next answers follow `plan`: "split" (the head, then the body 50 ms later), "silent" (nothing
    for 2 s), "drop" (the connection closed without an answer), "stream" (one event); plain otherwise."""

    protocol_version = "HTTP/1.1"
    plan: ClassVar[list[str]] = []
    posts: ClassVar[int] = 0
    ended: ClassVar[int] = 0  # connections the router closed (or that ended) while the engine served

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass  # the router closed it mid-answer
        finally:
            type(self).ended += 1

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        type(self).posts += 1
        step = self.plan.pop(0) if self.plan else "plain"
        if step == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if step == "silent":
            time.sleep(2.0)
            self.close_connection = True
            return
        self.send_response(200)
        if step == "stream":
            event = b'data: {"choices": [{"index": 0, "text": " hi"}]}\n\ndata: [DONE]\n\n'
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(event)))
            self.end_headers()
            self.wfile.write(event)
            return
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        if step == "split":
            self.wfile.flush()
            time.sleep(0.05)
        self.wfile.write(ANSWER)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _engine(*plan: str) -> Iterator[str]:
    _Scripted.plan = list(plan)
    _Scripted.posts = 0
    _Scripted.ended = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _in_flight(rt: RouterThread) -> int:
    assert rt.router is not None
    return rt.router.pools["hot"][0].in_flight


def _metrics(rt: RouterThread) -> str:
    return httpx.get(rt.url + "/metrics").text


def test_an_answer_in_pieces_is_relayed_from_callbacks_and_a_stream_goes_to_a_task() -> None:
    with _engine("plain", "split", "stream") as url, router(url, url) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            r = Reader(sock)
            for _ in range(2):  # the first connects in a task; the second goes on the pooled connection
                sock.sendall(_post(b"/v1/completions", BODY))
                status, headers, body = r.response()
                assert status == 200 and body == ANSWER and headers[b"content-length"] == str(len(ANSWER)).encode()
            assert seen == {"answered": 1, "taken": 1, "declined": 0}
            sock.sendall(_post(b"/v1/completions", b'{"prompt": "hi", "stream": true}'))
            status, headers, body = r.response()
            assert status == 200 and headers[b"content-type"] == b"text/event-stream" and body.endswith(b"[DONE]\n\n")
        assert seen == {"answered": 1, "taken": 2, "declined": 0}  # streamed: its task relays it as it comes
        assert _in_flight(rt) == 0
        text = _metrics(rt)
        assert 'router_requests_total{endpoint="/v1/completions",route="hot",status="200"} 3.0' in text
        assert "router_prompt_tokens_checked_total 2.0" in text  # the engine's usage read on both whole answers


def test_an_engine_silent_past_the_read_timeout_gets_504_and_frees_its_slot() -> None:
    with _engine("plain", "silent") as url, router(url, url, upstream_timeout_s=0.5) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            r = Reader(sock)
            sock.sendall(_post(b"/v1/completions", BODY))
            assert r.response()[0] == 200
            sock.sendall(_post(b"/v1/completions", BODY))
            status, _, body = r.response()
        assert status == 504 and b"upstream_timeout" in body
        assert seen == {"answered": 1, "taken": 1, "declined": 0}  # taken whole; at the timeout a task answers it
        assert _in_flight(rt) == 0
        assert 'router_upstream_errors_total{kind="timeout",upstream="hot"} 1.0' in _metrics(rt)


def test_a_pooled_connection_the_engine_dropped_is_sent_again_on_a_fresh_one() -> None:
    with _engine("plain", "drop") as url, router(url, url) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            r = Reader(sock)
            sock.sendall(_post(b"/v1/completions", BODY))
            assert r.response()[0] == 200
            sock.sendall(_post(b"/v1/completions", BODY))
            status, _, body = r.response()
        assert status == 200 and body == ANSWER
        assert _Scripted.posts == 3  # the dropped one was sent again, by the task it was handed to
        assert seen == {"answered": 1, "taken": 1, "declined": 0}
        assert _in_flight(rt) == 0


def test_a_client_leaving_before_its_answer_frees_the_slot_and_counts_499() -> None:
    with _engine("plain", "silent") as url, router(url, url, upstream_timeout_s=5) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            r = Reader(sock)
            sock.sendall(_post(b"/v1/completions", BODY))
            assert r.response()[0] == 200
            sock.sendall(_post(b"/v1/completions", BODY))
            wait_for(lambda: _in_flight(rt) == 1, what="in flight")
        wait_for(lambda: _in_flight(rt) == 0, what="slot freed")
        wait_for(lambda: 'route="hot",status="499"} 1.0' in _metrics(rt), what="the 499 counted")
        assert seen == {"answered": 1, "taken": 1, "declined": 0}  # taken whole: the hang-up answered it


def test_a_failure_relaying_in_callbacks_is_served_by_the_task_path() -> None:
    with _engine() as url, router(url, url) as rt, _counted(rt) as seen:
        assert rt.router is not None
        proxy = rt.router.proxy
        real = proxy.answer_now
        failed: list[bool] = []

        def fail_once(*args: Any) -> None:
            if not failed:
                failed.append(True)
                raise RuntimeError("relay failed")
            real(*args)

        proxy.answer_now = fail_once  # type: ignore[method-assign]
        with _connect(rt.url) as sock:
            r = Reader(sock)
            for _ in range(3):
                sock.sendall(_post(b"/v1/completions", BODY))
                status, _, body = r.response()
                assert status == 200 and body == ANSWER
        assert failed == [True] and seen == {"answered": 2, "taken": 1, "declined": 0}
        assert _in_flight(rt) == 0
        assert 'router_requests_total{endpoint="/v1/completions",route="hot",status="200"} 3.0' in _metrics(rt)


def test_a_short_bad_body_forwarded_before_it_was_read_is_refused_and_its_engine_connection_closed() -> None:
    with _engine() as url, router(url, url) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            r = Reader(sock)
            sock.sendall(_post(b"/v1/completions", BODY))  # connects in a task; the connection is pooled after
            assert r.response()[0] == 200
            sock.sendall(_post(b"/v1/completions", b'{"prompt": 5}'))  # short: forwarded on the pooled one, then read
            status, _, body = r.response()
            assert status == 400 and b"'prompt' must be a string" in body
            wait_for(lambda: _Scripted.ended == 1, what="the engine connection closed")
            for _ in range(2):  # the refused one's engine connection was closed: a fresh one, then pooled again
                sock.sendall(_post(b"/v1/completions", BODY))
                assert r.response()[0] == 200
        assert seen == {"answered": 1, "taken": 3, "declined": 0}
        assert _in_flight(rt) == 0
        text = _metrics(rt)
        assert 'router_rejections_total{rule="bad_request"} 1.0' in text
        assert 'router_requests_total{endpoint="/v1/completions",route="none",status="400"} 1.0' in text
        assert 'router_requests_total{endpoint="/v1/completions",route="hot",status="200"} 3.0' in text
