"""A Kubernetes API server stand-in on loopback that replays recorded exchanges (tests/fixtures/k8s/*.json).

No API server can run here, so the real `kubernetes` client talks real HTTP to this server, which answers each
request with the next recorded response after checking the request is the recorded one: method, path, query,
Content-Type and (for a patch) the JSON body. A request that differs is answered 500 and noted in `mismatches`;
a test asserts there are none and that every exchange was used. A watch response is the recorded events, one
JSON object a line, as the API server streams them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"


def load(name: str) -> list[dict[str, Any]]:
    """The exchanges of fixture `name` (without .json)."""
    return list(json.loads((FIXTURES / f"{name}.json").read_text())["exchanges"])


class Replay:
    """The exchanges still to be answered, the requests seen, and what did not match."""

    def __init__(self, exchanges: list[dict[str, Any]]) -> None:
        self.pending = list(exchanges)
        self.seen: list[dict[str, Any]] = []
        self.mismatches: list[str] = []
        self.url = ""

    def answer(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str],
                                                                                               bytes]:
        parts = urlsplit(target)
        got = {"method": method, "path": parts.path, "query": dict(parse_qsl(parts.query)),
               "content_type": headers.get("content-type"), "body": json.loads(body) if body else None}
        self.seen.append(got)
        if not self.pending:
            self.mismatches.append(f"unexpected request (no exchange left): {got}")
            return 500, {}, b"{}"
        ex = self.pending.pop(0)
        want = {"query": {}, "content_type": None, "body": None, **ex["request"]}
        diff = [k for k in ("method", "path", "query", "content_type", "body") if want[k] != got[k]]
        if diff:
            self.mismatches.append(f"request {len(self.seen)}: {', '.join(diff)} differ: sent {got}, "
                                   f"recorded {want}")
            return 500, {}, b"{}"
        resp = ex["response"]
        if "events" in resp:
            data = b"".join(json.dumps(e).encode() + b"\n" for e in resp["events"])
        else:
            data = json.dumps(resp["body"]).encode()
        return int(resp["status"]), dict(resp.get("headers") or {"Content-Type": "application/json"}), data

    def assert_all_used(self) -> None:
        assert not self.mismatches, "\n".join(self.mismatches)
        assert not self.pending, f"{len(self.pending)} recorded exchange(s) never requested: " + \
            ", ".join(f"{e['request']['method']} {e['request']['path']}" for e in self.pending)


@contextmanager
def api_server(exchanges: list[dict[str, Any]]) -> Iterator[Replay]:
    """A loopback HTTP server answering `exchanges` in order, one connection at a time."""
    replay = Replay(exchanges)

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers, data = replay.answer(self.command, self.path,
                                                  {k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    replay.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield replay
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
