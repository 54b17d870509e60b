"""Routing by length, streaming passthrough, the length limit and its expiry, overflow, failover."""

from __future__ import annotations

import asyncio
import json

import httpx
from router_helpers import AUTH, FakeClock, change, complete, engine, prompt, router, served_by, wait_for


def test_routes_by_length_and_counts_misroutes() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        assert [served_by(complete(c, n)) for n in (10, 999, 1000, 3000)] == ["hot-m", "hot-m", "cold-m", "cold-m"]
        chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hello"}],
                                                    "max_tokens": 3})
        assert chat.status_code == 200 and served_by(chat) == "hot-m"
        # The estimate says 500 tokens (4 chars each) but the engine counts 1000 words: a misroute.
        r = c.post("/v1/completions", json={"prompt": "a b " * 500, "max_tokens": 2})
        assert served_by(r) == "hot-m" and r.json()["usage"]["prompt_tokens"] == 1000
        assert c.get("/v1/models").json()["data"][0]["id"] == "hot-m"
        metrics = c.get("/metrics").text
        assert 'router_misrouted_total{direction="long_as_short"} 1.0' in metrics
        assert "router_prompt_tokens_checked_total 6.0" in metrics
        assert 'router_requests_total{endpoint="/v1/completions",route="cold",status="200"} 2.0' in metrics
        assert 'router_token_count_method{method="estimate"} 1.0' in metrics
        health = c.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"


def test_streaming_passes_chunks_through_as_they_arrive() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 400, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        events: list[str] = []
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data:"))
            events.append(first)
            # Freeze the engine: what we already hold was passed through before the response ended.
            httpx.post(hot.url + "/pause")
            next_event = next(line for line in lines if line.startswith("data:"))
            events.append(next_event)
            httpx.post(hot.url + "/resume")
            events += [line for line in lines if line.startswith("data:")]
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e[5:]) for e in events[:-1]]
        assert chunks[0]["model"] == "hot-m"
        assert chunks[-1]["usage"]["completion_tokens"] == 400
        text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks if ch["choices"])
        assert len(text.split()) == 400
        metrics = c.get("/metrics").text
        gaps = [ln for ln in metrics.splitlines() if ln.startswith("router_stream_chunk_gap_seconds_count")]
        assert gaps and float(gaps[0].split()[-1]) > 10
        assert "router_stream_chunk_gap_squared_seconds_total" in metrics


def test_length_limit_413_names_the_limit_and_expires() -> None:
    clock = FakeClock()
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url, clock=clock) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        change(c, length_limit_tokens=2000, length_limit_expires_at=clock.now + 600)
        r = complete(c, 2500)
        assert r.status_code == 413
        err = r.json()["error"]
        assert err["limit_tokens"] == 2000 and "2000" in err["message"] and err["rule"] == "length_limit"
        assert complete(c, 2000).status_code == 200  # at the limit: allowed
        assert "router_length_limit_tokens 2000.0" in c.get("/metrics").text
        clock.advance(601)
        assert complete(c, 2500).status_code == 200
        assert c.get("/router/policy", headers=AUTH).json()["status"]["length_limit_active"] is False
        # Scoped to one client: others pass.
        change(c, length_limit_tokens=100, length_limit_expires_at=None, length_limit_client="batch-job")
        assert c.post("/v1/completions", json={"prompt": prompt(500), "max_tokens": 2},
                      headers={"X-Client-Id": "batch-job"}).status_code == 413
        assert complete(c, 500).status_code == 200
        assert complete(c, 500, user="batch-job").status_code == 413
        assert 'router_rejections_total{rule="length_limit"} 3.0' in c.get("/metrics").text


def _gauge(client: httpx.Client, name: str) -> float:
    line = next(ln for ln in client.get("/metrics").text.splitlines() if ln.startswith(name + " "))
    return float(line.split()[-1])


def test_length_limit_idle_seconds_count_from_the_last_refusal() -> None:
    clock = FakeClock()
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url, clock=clock) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        idle = "router_length_limit_idle_seconds"
        assert _gauge(c, idle) == 0.0  # no limit in force
        change(c, length_limit_tokens=2000, length_limit_expires_at=clock.now + 3600)
        clock.advance(100)
        assert _gauge(c, idle) == 100.0  # refused nothing yet: counted from when it was set
        assert complete(c, 2500).status_code == 413
        clock.advance(30)
        assert _gauge(c, idle) == 30.0  # from the last refusal
        assert complete(c, 1500).status_code == 200  # under the limit: not a refusal
        clock.advance(20)
        assert _gauge(c, idle) == 50.0
        change(c, length_limit_expires_at=clock.now + 7200)  # a longer expiry is the same limit
        assert _gauge(c, idle) == 50.0
        change(c, length_limit_tokens=4000)  # a new limit starts afresh
        clock.advance(5)
        assert _gauge(c, idle) == 5.0
        change(c, length_limit_tokens=None, length_limit_expires_at=None)
        assert _gauge(c, idle) == 0.0


async def _overflow(url: str, hot_url: str) -> tuple[list[int], httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"prompt": prompt(10), "max_tokens": 5}
        httpx.post(hot_url + "/pause")  # the engine holds what it gets
        held = [asyncio.ensure_future(c.post("/v1/completions", json=body)) for _ in range(3)]
        for _ in range(500):
            doc = (await c.get("/router/policy", headers=AUTH)).json()["status"]
            if doc["queues"]["hot"] == 2 and doc["upstreams"]["hot"]["in_flight"] == 1:
                break
            await asyncio.sleep(0.01)
        over = await c.post("/v1/completions", json=body)
        httpx.post(hot_url + "/resume")
        done = await asyncio.gather(*held)
        return [r.status_code for r in done], over


def test_queue_overflow_answers_429_with_retry_after() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url, max_in_flight=1,
                                                                  max_queue=2) as rt:
        statuses, over = asyncio.run(_overflow(rt.url, hot.url))
        assert over.status_code == 429
        assert int(over.headers["retry-after"]) >= 1
        assert over.json()["error"]["rule"] == "queue_full"
        assert statuses == [200, 200, 200]


def test_engine_down_fails_over_when_the_prompt_fits_else_503() -> None:
    with engine("hot-m", "--max-model-len", "4096") as hot, engine("cold-m") as cold, \
            router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        assert served_by(complete(c, 2000)) == "cold-m"
        cold.stop()
        r = complete(c, 2000)  # cold is gone: the router notices on connect and fails over to hot
        assert r.status_code == 200 and served_by(r) == "hot-m"
        r = complete(c, 5000)  # does not fit hot's max_model_len 4096
        assert r.status_code == 503
        assert "does not fit" in r.json()["error"]["message"]
        assert served_by(complete(c, 10)) == "hot-m"
        health = c.get("/health").json()
        assert health["status"] == "degraded" and health["roles"] == {"hot": True, "cold": False}
        hot.stop()
        wait_for(lambda: c.get("/health").status_code == 503, what="router health to report down")
        r = complete(c, 10)
        assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailable"


def test_dead_engine_is_taken_out_by_health_checks() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        httpx.post(cold.url + "/sim/fault", json={"fault": "engine-death"})
        wait_for(lambda: c.get("/health").json()["roles"]["cold"] is False, what="cold marked down")
        r = complete(c, 2000)
        assert r.status_code == 200 and served_by(r) == "hot-m"
