"""Bad input: invalid JSON, missing prompt, a 50 MB body, a client leaving mid-stream, a hung engine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
from router_helpers import complete, engine, router, served_by, wait_for

FIFTY_MB = 50 * 1024 * 1024


def test_invalid_json_and_missing_prompt_get_clear_400s() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        r = c.post("/v1/completions", content=b'{"prompt": "x", ', headers={"content-type": "application/json"})
        assert r.status_code == 400 and "invalid JSON" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json={"max_tokens": 3})
        assert r.status_code == 400 and "missing field 'prompt'" in r.json()["error"]["message"]
        r = c.post("/v1/chat/completions", json={"messages": []})
        assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json=["not", "an", "object"])
        assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json={"prompt": 42})
        assert r.status_code == 400 and "'prompt' must be" in r.json()["error"]["message"]
        assert 'router_rejections_total{rule="bad_request"} 5.0' in c.get("/metrics").text
        assert complete(c, 10).status_code == 200


def test_a_50mb_body_is_refused_early_with_413() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url,
                                                                  max_body_bytes=1024 * 1024) as rt:
        c = httpx.Client(base_url=rt.url, timeout=60)
        r = c.post("/v1/completions", content=b"x" * FIFTY_MB, headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert r.json()["error"]["limit_bytes"] == 1024 * 1024 and "1048576" in r.json()["error"]["message"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
            for _ in range(50):
                yield b" " * (1024 * 1024)

        r = c.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert complete(c, 10).status_code == 200
        assert 'router_rejections_total{rule="body_too_large"} 2.0' in c.get("/metrics").text


async def _leave_mid_stream(url: str) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"prompt": "go", "max_tokens": 5000, "ignore_eos": True, "stream": True}
        got = 0
        async with c.stream("POST", "/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    got += 1
                if got >= 5:
                    break
        return got


def test_client_disconnect_mid_stream_is_propagated_to_the_engine() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        assert asyncio.run(_leave_mid_stream(rt.url)) == 5
        assert hot.handle is not None
        core = hot.handle.runtime.core
        wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 0, what="slot freed")
        wait_for(lambda: not core.requests, what="the engine to abort the request")
        c = httpx.Client(base_url=rt.url, timeout=30)
        assert 'router_requests_total{endpoint="/v1/completions",route="hot",status="499"} 1.0' in \
            c.get("/metrics").text
        assert complete(c, 10).status_code == 200


def test_a_hung_engine_times_out_and_the_router_keeps_serving_others() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url, upstream_timeout_s=0.5) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        httpx.post(hot.url + "/sim/fault", json={"fault": "hang"})
        results: list[httpx.Response] = []

        async def both() -> None:
            async with httpx.AsyncClient(base_url=rt.url, timeout=30) as ac:
                hung = ac.post("/v1/completions", json={"prompt": "short", "max_tokens": 3})
                fine = ac.post("/v1/completions", json={"prompt": "tok " * 2000, "max_tokens": 3})
                results.extend(await asyncio.gather(hung, fine))

        asyncio.run(both())
        hung_r, fine_r = results
        assert hung_r.status_code == 504
        assert "hot" in hung_r.json()["error"]["message"] and hung_r.json()["error"]["type"] == "GatewayTimeout"
        assert fine_r.status_code == 200 and served_by(fine_r) == "cold-m"
        # A stream has its 200 already: the timeout arrives as an error event, then the stream ends.
        r = c.post("/v1/completions", json={"prompt": "short", "max_tokens": 3, "stream": True})
        assert r.status_code == 200 and '"GatewayTimeout"' in r.text and "mid-stream" in r.text
        wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 0, what="slots freed")
