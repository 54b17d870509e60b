"""A plain proxied request is taken as far as the engine in the callback that read it (Proxy.begin, started by the
lean server once the whole body is in), and everything else is served the usual way, with the same answers: a body
arriving in pieces, pipelined requests, a bad body, a queue, a client that leaves before or after its request is in."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from router_helpers import engine, router, wait_for
from test_lean_server import BODY, Reader, _connect, _post

from router.policy import Policy
from router.release import AdmissionCore, AdmissionIo
from router.server import RouterThread
from router.upstreams import Upstream


@contextmanager
def _counted(rt: RouterThread) -> Iterator[dict[str, int]]:
    """How often the live router's Proxy.begin took a request whole (answered from callbacks), took it and left the
    rest to a task, or declined it."""
    assert rt.router is not None
    proxy = rt.router.proxy
    real = proxy.begin
    seen = {"answered": 0, "taken": 0, "declined": 0}

    def begin(*args: Any) -> Any:
        begun = real(*args)
        seen["answered" if begun is True else "taken" if begun is not None else "declined"] += 1
        return begun

    proxy.begin = begin  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        proxy.begin = real  # type: ignore[method-assign]


def _requests(rt: RouterThread) -> str:
    return httpx.get(rt.url + "/metrics").text


def test_a_plain_request_pieces_and_pipelining_go_at_once_and_are_answered_alike() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            r = Reader(sock)
            sock.sendall(_post(b"/v1/completions", BODY))
            status, _, body = r.response()
            assert status == 200 and b'"hot-m"' in body
            assert seen == {"answered": 0, "taken": 1, "declined": 0}  # no engine connection yet: a task connects
            whole = _post(b"/v1/completions", BODY)  # the body in a second packet: started once it is in
            sock.sendall(whole[:-10])
            time.sleep(0.1)
            sock.sendall(whole[-10:])
            status, _, body = r.response()
            assert status == 200 and b'"hot-m"' in body
            long_body = b'{"prompt": "' + b"tok " * 1500 + b'", "max_tokens": 2}'
            sock.sendall(_post(b"/v1/completions", long_body) + _post(b"/v1/completions", BODY))
            first, second = r.response(), r.response()
        assert first[0] == 200 and b'"cold-m"' in first[2]
        assert second[0] == 200 and b'"hot-m"' in second[2]
        assert seen == {"answered": 2, "taken": 2, "declined": 0}  # the first to each engine connects in a task
        assert 'router_requests_total{endpoint="/v1/completions",route="hot",status="200"} 3.0' in _requests(rt)


def test_what_begin_declines_is_answered_the_usual_way() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, \
            router(hot.url, cold.url, batch_timeout_ms=50) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            r = Reader(sock)
            sock.sendall(_post(b"/v1/completions", b'{"prompt": '))
            status, _, body = r.response()
            assert status == 400 and b"invalid JSON" in body
            sock.sendall(_post(b"/v1/completions", BODY))  # the batch timeout holds requests: it waits its turn
            status, _, body = r.response()
            assert status == 200 and b'"hot-m"' in body
        assert seen == {"answered": 0, "taken": 0, "declined": 2}
        assert rt.router is not None and rt.router.pools["hot"][0].in_flight == 0


def test_a_client_leaving_before_its_body_is_in_or_before_its_answer_leaves_nothing_held() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt, _counted(rt) as seen:
        with _connect(rt.url) as sock:
            sock.sendall(_post(b"/v1/completions", BODY)[:-5])  # never started: its body never came
        slow = b'{"prompt": "go", "max_tokens": 2000, "ignore_eos": true}'
        with _connect(rt.url) as sock:
            sock.sendall(_post(b"/v1/completions", slow))
            wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 1, what="in flight")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 0, what="slot freed")
        wait_for(lambda: 'route="hot",status="499"} 1.0' in _requests(rt), what="the 499 counted")
        assert seen == {"answered": 0, "taken": 1, "declined": 0}
        assert httpx.post(rt.url + "/v1/completions", content=BODY).status_code == 200  # and it serves on


def test_take_next_spends_a_sequence_number_only_on_a_slot() -> None:
    hot = Upstream("hot", "http://h", "hot", max_in_flight=1)
    cold = Upstream("cold", "http://c", "cold")
    hot.healthy = cold.healthy = True
    io: AdmissionIo[str] = AdmissionIo(lambda: 0.0, lambda when, fn: None, lambda t, u: None, lambda t, e: None)
    core: AdmissionCore[str] = AdmissionCore({"hot": [hot], "cold": [cold]}, lambda: Policy(batch_timeout_ms=0), io)
    assert core.take_next("hot") is hot and core.dispatch_log == [("hot", 1)]
    assert core.take_next("hot") is None  # full: no slot, no number spent
    assert core.next_seq() == 2
