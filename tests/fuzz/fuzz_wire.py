"""The router's own HTTP/1.1 client reading an engine's response (router/wire.py `_Conn`, httptools inside):
status line, headers (folding, oversized, conflicting content-length, chunked), body, and the connection
closing early. Only the socket is substituted: bytes arrive in reads of a fuzzed size.

Contract: parsing never raises out of the protocol callbacks; a failure is a WireError on the connection; a
response that completed has a status line and headers; a connection that can go back to the pool finished
its one response cleanly."""

from __future__ import annotations

import asyncio

from router.wire import WireError, _Conn


class _Socket:
    """The transport side of one connection (what asyncio would give the protocol)."""

    def __init__(self) -> None:
        self.paused = self.aborted = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        self.aborted = True

    def write(self, data: bytes) -> None:
        pass


_LOOP = asyncio.new_event_loop()


def fuzz_one(data: bytes) -> None:
    if len(data) < 2:
        return
    step, how = data[0] % 61 + 1, data[1]
    stream = data[2:]
    conn = _Conn(_LOOP)
    sock = _Socket()
    conn.connection_made(sock)  # type: ignore[arg-type]
    got = 0
    for i in range(0, len(stream), step):
        if conn.closed:
            break
        conn.data_received(stream[i:i + step])
        if how & 1:  # the proxy reads the body as it arrives (else it all stays buffered)
            while (chunk := conn.take_chunk()) is not None:
                got += len(chunk)
    if how & 2 and not conn.closed:  # the engine closes: cleanly, or with a reset
        conn.connection_lost(None if how & 4 else ConnectionResetError("reset"))
    while (chunk := conn.take_chunk()) is not None:
        got += len(chunk)
    assert got <= len(stream)
    assert conn.error is None or isinstance(conn.error, WireError), conn.error
    if conn.head_done:
        assert 100 <= conn.status <= 999, conn.status
    if conn.complete and conn.error is None:
        assert conn.head_done
    if conn.reusable():
        assert conn.complete and not conn.unasked and not sock.aborted
