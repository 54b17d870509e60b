"""What the security tests share: a self-signed certificate, raw HTTP exchanges over a socket, a recording
upstream engine (real HTTP on loopback), and processes started from this checkout."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def selfsigned(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (0600), made here with the `openssl` CLI."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    key.chmod(0o600)
    return cert, key


def client_context(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exchange(port: int, raw: bytes, *, tls: ssl.SSLContext | None = None,
             timeout_s: float = 20.0) -> tuple[bytes, bool]:
    """Send raw bytes; read until the server closes or goes quiet. (what came back, whether it closed)"""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
    data, closed = b"", False
    with sock:
        with contextlib.suppress(OSError):  # the server may close before it has read everything: its answer counts
            sock.sendall(raw)
        sock.settimeout(3.0)
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    closed = True
                    break
                data += chunk
        except TimeoutError:
            pass
        except (ConnectionResetError, ssl.SSLError):
            closed = True
    return data, closed


def status_of(response: bytes) -> int:
    line = response.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else 0


def body_of(response: bytes) -> dict[str, object]:
    doc = json.loads(response.split(b"\r\n\r\n", 1)[1])
    assert isinstance(doc, dict)
    return doc


class Upstream:
    """A stand-in engine on loopback that answers /health and records every other request it receives."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, doc: object) -> None:
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path not in ("/health", "/v1/models"):
                    upstream.requests.append(f"GET {self.path}")
                self._answer({"data": []} if self.path == "/v1/models" else {"ok": True})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                upstream.requests.append(f"POST {self.path}")
                self._answer({"id": "x", "object": "text_completion", "choices": [{"text": "ok", "index": 0}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Upstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def process(argv: Sequence[str], log: Path, *, env: dict[str, str] | None = None,
            umask: int | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A process of this checkout (`python -m ...`), output to `log`, stopped (and reaped) at the end."""
    preexec: Callable[[], object] | None = (lambda: os.umask(umask)) if umask is not None else None
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, preexec_fn=preexec)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def wait_until(what: str, probe: Callable[[], bool], proc: subprocess.Popen[bytes] | None, log: Path,
               timeout_s: float = 60.0) -> None:
    """Until `probe()` holds (a bounded wait); AssertionError with the log when the process exits or time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError, httpx.HTTPError):
            if probe():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g}s:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0
