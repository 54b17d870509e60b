"""The router as its own process (`python -m router.cli`): request smuggling shapes sent as raw bytes are answered
400 and the connection closed, with nothing reaching the engine; header and body limits; the policy API's bearer
token; loopback by default, a loud warning beyond it; TLS with a certificate the client verifies; token and key
files anyone may read are refused."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from router.secrets import write_private
from tests.security.helpers import (
    Upstream,
    body_of,
    client_context,
    exchange,
    free_port,
    listening,
    process,
    selfsigned,
    status_of,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)
TOKEN = "router-policy-t0ken-0123456789"
HEADER_LIMIT = 4096
PASSWORD = "upstream-pa55"


@dataclass
class Running:
    port: int
    upstream: Upstream
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _router(tmp: Path, up: Upstream, *extra: str, port: int | None = None, hot: str | None = None) -> list[str]:
    (tmp / "router.toml").write_text(f"max_header_bytes = {HEADER_LIMIT}\nmax_body_bytes = 65536\n")
    return ["-m", "router.cli", "--hot", hot or up.url, "--cold", up.url, "--port", str(port or free_port()),
            "--policy-file", "", "--config", str(tmp / "router.toml"), *extra]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    tmp = Path(tmp_path_factory.mktemp("router-sec"))
    port, log = free_port(), tmp / "router.log"
    with Upstream() as up, process(_router(tmp, up, port=port, hot=up.url.replace("//", f"//ops:{PASSWORD}@")),
                                   log, env={"ROUTER_POLICY_TOKEN": TOKEN}) as proc:
        wait_until("the router listening", lambda: listening(port), proc, log)
        yield Running(port, up, log)


def _post(body: bytes, *headers: str) -> bytes:
    return b"\r\n".join([b"POST /v1/completions HTTP/1.1", b"Host: 127.0.0.1", *(h.encode() for h in headers),
                         b"", body])


SMUGGLING = {
    "content-length and transfer-encoding": _post(b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
                                                   "Content-Length: 44", "Transfer-Encoding: chunked"),
    "two conflicting content-lengths": _post(b'{"prompt": "hi"}', "Content-Length: 16", "Content-Length: 5"),
    "obs-fold header line": _post(b'{"prompt": "hi"}', "Content-Length: 16", "X-Folded: a", " b"),
    "invalid chunk size": _post(b"zz\r\nab\r\n0\r\n\r\n", "Transfer-Encoding: chunked"),
    "transfer-encoding gzip, chunked": _post(b"0\r\n\r\n", "Transfer-Encoding: gzip, chunked"),
    "transfer-encoding identity": _post(b"", "Transfer-Encoding: identity"),
    "two transfer-encodings": _post(b"0\r\n\r\n", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"),
}


def test_a_sound_request_reaches_the_engine(router: Running) -> None:
    """The control for the smuggling cases: the same path, framed properly, is proxied."""
    body = b'{"model": "m", "prompt": "hi", "max_tokens": 1}'
    response, _ = exchange(router.port, _post(body, f"Content-Length: {len(body)}", "Content-Type: application/json",
                                              "Connection: close"))
    assert status_of(response) == 200, response[:300]
    assert "POST /v1/completions" in router.upstream.requests


@pytest.mark.parametrize("shape", sorted(SMUGGLING))
def test_request_smuggling_shapes_get_400_and_a_closed_connection(router: Running, shape: str) -> None:
    before = list(router.upstream.requests)
    response, closed = exchange(router.port, SMUGGLING[shape])
    assert status_of(response) == 400, (shape, response[:300])
    assert b"connection: close" in response.lower() and closed, shape
    reason = body_of(response)["error"]
    assert isinstance(reason, dict) and reason["message"], reason
    assert router.upstream.requests == before, f"{shape}: a request reached the engine"
    assert not any("smuggled" in r for r in router.upstream.requests)


def test_headers_over_the_limit_get_431_naming_it(router: Running) -> None:
    raw = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 * HEADER_LIMIT) + b"\r\n\r\n"
    response, closed = exchange(router.port, raw)
    assert status_of(response) == 431 and closed, response[:300]
    assert str(HEADER_LIMIT) in str(body_of(response)["error"])
    # a header that never ends is bounded too (httptools would buffer it whole)
    response, closed = exchange(router.port, b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * (8 * HEADER_LIMIT + 70000))
    assert status_of(response) == 431 and closed, response[:300]


def test_bodies_over_the_limits_get_413(router: Running) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.put(router.url + "/router/policy", content=b"x" * (1024 * 1024 + 1), headers=auth, trust_env=False,
                  timeout=30)
    assert r.status_code == 413 and "bytes" in r.json()["error"]["message"]
    r = httpx.post(router.url + "/v1/completions", content=b"x" * 70000, trust_env=False, timeout=30)
    assert r.status_code == 413 and "65536" in r.json()["error"]["message"]


def test_the_policy_api_needs_the_bearer_token(router: Running) -> None:
    doc = httpx.get(router.url + "/router/policy", headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False)
    assert doc.status_code == 200
    change = {k: v for k, v in doc.json().items() if k not in ("status", "updated_at")}
    change["batch_timeout_ms"] = 60
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": f"Bearer {TOKEN}x"}):
        r = httpx.put(router.url + "/router/policy", json=change, headers=headers, trust_env=False)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), headers
        assert httpx.get(router.url + "/router/policy", headers=headers, trust_env=False).status_code == 401
    r = httpx.put(router.url + "/router/policy", json=change, headers={"Authorization": f"Bearer {TOKEN}"},
                  trust_env=False)
    assert r.status_code == 200 and r.json()["changes"] == ["batch_timeout_ms: 0 -> 60"]


def test_on_loopback_there_is_no_exposure_warning_and_the_log_keeps_secrets_out(router: Running) -> None:
    said = router.log.read_text()
    assert "listening on http://127.0.0.1" in said and "reachable from other hosts" not in said
    assert "upstream hot (http://[redacted]@127.0.0.1" in said and PASSWORD not in said and TOKEN not in said


def test_beyond_loopback_it_warns_loudly_and_serves_tls_the_client_verifies(tmp_path: Path) -> None:
    cert, key = selfsigned(tmp_path)
    port, log = free_port(), tmp_path / "router.log"
    with Upstream() as up, process(_router(tmp_path, up, "--host", "0.0.0.0", "--tls-cert", str(cert),
                                           "--tls-key", str(key), port=port), log,
                                   env={"ROUTER_POLICY_TOKEN": TOKEN}) as proc:
        wait_until("the router listening", lambda: listening(port), proc, log)
        wait_until("the warning", lambda: "WARNING: the router listens" in log.read_text(), proc, log)
        assert f"listens on 0.0.0.0:{port}, reachable from other hosts" in log.read_text()
        r = httpx.get(f"https://127.0.0.1:{port}/router/policy", headers={"Authorization": f"Bearer {TOKEN}"},
                      verify=client_context(cert), trust_env=False, timeout=10)
        assert r.status_code == 200 and r.json()["upstreams"]["hot"][0]["url"] == up.url
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate refuses it
            httpx.get(f"https://127.0.0.1:{port}/health", trust_env=False, timeout=10)
        response, _ = exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                               tls=client_context(cert))
        assert status_of(response) in (200, 503)


@pytest.mark.parametrize("which", ["token", "key"])
def test_token_and_key_files_anyone_may_read_are_refused(tmp_path: Path, which: str) -> None:
    cert, key = selfsigned(tmp_path)
    token = tmp_path / "token"
    write_private(token, TOKEN + "\n")
    loose = token if which == "token" else key
    loose.chmod(0o644)
    (tmp_path / "r.toml").write_text(f'token_file = "{token}"\n')
    log = tmp_path / "router.log"
    argv = ["-m", "router.cli", "--hot", "http://127.0.0.1:9", "--cold", "http://127.0.0.1:9", "--port",
            str(free_port()), "--policy-file", "", "--config", str(tmp_path / "r.toml"), "--tls-cert", str(cert),
            "--tls-key", str(key)]
    with process(argv, log) as proc:
        assert proc.wait(60) == 2
    said = log.read_text()
    assert f"{loose} has mode 0644" in said and f"chmod 600 {loose}" in said and "Traceback" not in said
