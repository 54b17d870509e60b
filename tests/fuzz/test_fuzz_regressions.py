"""What fuzzing (and reading the parsers for it) found, each fixed in the product and held here, through real
HTTP on loopback where the parser sits behind a listener."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import httpx
import pytest

from collectors.routersource import read_router
from doctor.config import load_config
from doctor.config_schema import ConfigError
from doctor.diagnose import EXIT_UNUSABLE, main
from doctor.serve.alerts import PayloadError, parse
from router.policy import PolicyError, load_document
from router.tokens import BadPrompt, parse_body
from router.wire import WireClient, WireError
from tests.badinput.crafted import metrics_server
from tests.fuzz.targets import load
from tests.router.router_helpers import AUTH, engine, router

DEEP = b"[" * 20_000 + b"]" * 20_000  # json.loads recursed per level: RecursionError, not ValueError


def test_deeply_nested_json_is_bad_input_in_every_body_parser() -> None:
    with pytest.raises(PayloadError, match="nested too deeply"):
        parse(DEEP)
    with pytest.raises(BadPrompt, match="nested too deeply"):
        parse_body("completions", b'{"prompt": ' + DEEP + b"}")
    with pytest.raises(PolicyError, match="nested too deeply") as info:
        load_document(DEEP)
    assert info.value.status == 400


def test_router_answers_400_to_deeply_nested_bodies() -> None:
    with engine("hot") as hot, engine("cold") as cold, router(hot.url, cold.url) as rt, \
            httpx.Client(base_url=rt.url, timeout=30) as client:
        r = client.post("/v1/completions", content=DEEP, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "nested too deeply" in r.text, (r.status_code, r.text)
        r = client.put("/router/policy", content=DEEP, headers={**AUTH, "content-type": "application/json"})
        assert r.status_code == 400 and "nested too deeply" in r.text, (r.status_code, r.text)
        assert client.post("/v1/completions", json={"prompt": "a b", "max_tokens": 2}).status_code == 200


def test_an_unbalanced_bracket_in_a_url_is_a_config_error(tmp_path: Path) -> None:
    # fuzz crash-736eb35d: url = "http://127.0.0.1:8[001" raised urllib's ValueError("Invalid IPv6 URL")
    path = tmp_path / "doctor.toml"
    path.write_text('[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:8[001"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"engines\[0\]\.url: expected a URL like http://HOST:PORT"):
        load_config(path)
    err = io.StringIO()  # the same URL given as a flag
    code = main(["--engine", "hot=http://127.0.0.1:8[001", "--state-dir", str(tmp_path / "s")],
                out=io.StringIO(), err=err)
    assert code == EXIT_UNUSABLE and "the URL must look like http://HOST:PORT" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_router_refuses_an_upstream_url_it_cannot_dial() -> None:
    # fuzz (policy target): "http://127.0.0.1:80e$" passed the policy check; dialing it raised ValueError
    with engine("hot") as hot, engine("cold") as cold, router(hot.url, cold.url) as rt, \
            httpx.Client(base_url=rt.url, timeout=30) as client:
        doc = client.get("/router/policy", headers=AUTH).json()
        for bad in ("http://127.0.0.1:80e$", "http://[::1", "http://127.0.0.1:99999"):
            doc["upstreams"]["cold"] = [{"name": "cold", "url": bad}]
            body = {k: v for k, v in doc.items() if k not in ("status", "updated_at")}
            r = client.put("/router/policy", content=json.dumps(body), headers=AUTH)
            assert r.status_code == 400 and "upstreams.cold[0].url" in r.text, (bad, r.status_code, r.text)
        assert client.post("/v1/completions", json={"prompt": "a b", "max_tokens": 2}).status_code == 200


ROUTER_TEXT = ("router_prompt_tokens_checked_total 10\nrouter_misrouted_total NaN\n"
               'router_queue_time_seconds_bucket{le="\x000.0"} 1\nrouter_queue_time_seconds_bucket{le="+Inf"} 2\n'
               "router_queue_time_seconds_bucket 3\n")


def test_router_metrics_with_a_bad_bucket_bound_are_read_not_raised() -> None:
    # fuzz (router_metrics target): le="\x000.0" raised ValueError out of parse_router_metrics (no le: KeyError)
    async def read(url: str) -> object:
        async with httpx.AsyncClient() as client:
            return await read_router(client, url, timeout_s=10)

    with metrics_server(lambda n: ROUTER_TEXT) as url:
        sample = asyncio.run(read(url))
    snap = sample.data["snapshot"]  # type: ignore[attr-defined]
    assert snap.checked == 10.0 and snap.misrouted == 0.0  # the NaN counter is left out
    assert snap.queue is not None and snap.queue.bounds == (float("inf"),)


async def _answer(raw: bytes) -> tuple[int, bytes] | WireError:
    """POST through the router's WireClient to a loopback server that answers `raw` and closes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = WireClient(connect_timeout_s=10, read_timeout_s=10)
    try:
        resp = await client.post(f"http://127.0.0.1:{port}", "/v1/completions", b"{}", [])
        body = b"".join([c async for c in resp.iter_body()])
        resp.close()
        return resp.status, body
    except WireError as exc:
        return exc
    finally:
        client.close()
        server.close()
        await server.wait_closed()


def test_wire_refuses_a_status_outside_200_599() -> None:
    # fuzz crash-fe570acd: "HTTP/1.1 000 ..." was handed to the proxy as status 0
    got = asyncio.run(_answer(b"HTTP/1.1 000 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx"))
    assert isinstance(got, WireError) and "status 0 is not 200..599" in str(got)


def test_wire_skips_an_interim_1xx_response() -> None:
    # the same input with a real 100: the router returned the 100 as the answer and lost the 200 behind it
    got = asyncio.run(_answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx"))
    assert got == (200, b"x")


@pytest.mark.parametrize(("target", "data"), [
    ("wire", b"\x07\x03HTTP/1.1 000 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx"),
    ("alerts", DEEP), ("policy", DEEP), ("router_request", b"p" + DEEP),
    ("config", b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n"),
    ("config", b'[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:8[001"\n'),
    ("policy", b'{"route_threshold_tokens": 5, "upstreams": {"hot": ["http://127.0.0.1:80e$"]}}'),
    ("metrics", b'vllm:num_requests_running{engine="0"} +Inf\nvllm:kv_cache_usage_perc NaN\n'),
    ("router_metrics", ROUTER_TEXT.encode()),
])
def test_crash_inputs_pass_their_targets_now(target: str, data: bytes) -> None:
    load(target)(data)
