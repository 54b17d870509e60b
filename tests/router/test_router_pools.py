"""Upstream pools through the policy API: drain, add, swap under load; policy changes; fairness."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
from router_helpers import AUTH, change, complete, engine, policy_doc, prompt, put, router, served_by, wait_for


async def _slow_requests(url: str, n: int, max_tokens: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        return list(await asyncio.gather(*(c.post("/v1/completions", json={
            "prompt": prompt(10), "max_tokens": max_tokens, "ignore_eos": True}) for _ in range(n))))


def _in_background(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn(*args)), daemon=True)
    t.start()
    return t, box


def test_drain_takes_no_new_requests_and_lets_in_flight_ones_finish() -> None:
    with engine("blue") as blue, engine("green") as green, engine("cold-m") as cold, \
            router(blue.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=60)
        httpx.post(blue.url + "/pause")
        t, box = _in_background(lambda: asyncio.run(_slow_requests(rt.url, 4, 20)))
        wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 4, what="4 in flight")
        doc = policy_doc(c)
        doc["upstreams"]["hot"] = [{"name": "hot", "url": blue.url, "state": "draining"},
                                   {"name": "green", "url": green.url}]
        assert put(c, doc).status_code == 200
        assert [served_by(complete(c, 10)) for _ in range(3)] == ["green"] * 3  # nothing new to blue
        httpx.post(blue.url + "/resume")
        t.join(30)
        assert [r.status_code for r in box[0]] == [200] * 4
        assert {served_by(r) for r in box[0]} == {"blue"}
        assert all(r.json()["usage"]["completion_tokens"] == 20 for r in box[0])
        status = c.get("/router/policy", headers=AUTH).json()["status"]["upstreams"]
        assert status["hot"]["in_flight"] == 0 and status["hot"]["state"] == "draining"


def _load(url: str, stop: threading.Event, results: list[int], served: set[str]) -> None:
    async def worker(c: httpx.AsyncClient) -> None:
        while not stop.is_set():
            r = await c.post("/v1/completions", json={"prompt": prompt(10), "max_tokens": 4})
            results.append(r.status_code)
            if r.status_code == 200:
                served.add(r.json()["model"])

    async def main() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            await asyncio.gather(*(worker(c) for _ in range(4)))

    asyncio.run(main())


def test_add_and_swap_upstreams_under_load_without_a_failed_request() -> None:
    with engine("blue") as blue, engine("extra") as extra, engine("green") as green, engine("cold-m") as cold, \
            router(blue.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=60)
        results: list[int] = []
        served: set[str] = set()
        stop = threading.Event()
        t = threading.Thread(target=_load, args=(rt.url, stop, results, served), daemon=True)
        t.start()
        wait_for(lambda: len(results) >= 10, what="load to start")
        doc = policy_doc(c)  # add a replica
        doc["upstreams"]["hot"].append({"name": "extra", "url": extra.url})
        assert put(c, doc).status_code == 200
        wait_for(lambda: "extra" in served, what="the added replica to serve")
        doc = policy_doc(c)  # blue/green: green in, blue draining
        doc["upstreams"]["hot"] = [{"name": "hot", "url": blue.url, "state": "draining"},
                                   {"name": "extra", "url": extra.url}, {"name": "green", "url": green.url}]
        assert put(c, doc).status_code == 200
        wait_for(lambda: "green" in served, what="green to serve")
        wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 0, what="blue drained")
        doc = policy_doc(c)  # remove blue, then stop it
        doc["upstreams"]["hot"] = doc["upstreams"]["hot"][1:]
        assert put(c, doc).status_code == 200
        blue.stop()
        n = len(results)
        wait_for(lambda: len(results) >= n + 20, what="more load after the swap")
        stop.set()
        t.join(30)
        assert results and set(results) == {200}, f"failed requests: {[s for s in results if s != 200]}"
        assert {"blue", "extra", "green"} <= served
        history = c.get("/router/policy/history", headers=AUTH).json()["history"]
        assert [h["version"] for h in history] == [1, 2, 3, 4]
        assert any("removed" in ch for ch in history[-1]["changes"])


def test_policy_changes_take_effect_without_dropping_in_flight_requests() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=60)
        httpx.post(hot.url + "/pause")
        t, box = _in_background(lambda: asyncio.run(_slow_requests(rt.url, 3, 10)))
        wait_for(lambda: rt.router is not None and rt.router.pools["hot"][0].in_flight == 3, what="3 in flight")
        change(c, route_threshold_tokens=20, batch_timeout_ms=100, fairness_window=2)
        doc = policy_doc(c)
        doc["upstreams"]["hot"][0]["max_in_flight"] = 1
        assert put(c, doc).status_code == 200
        assert served_by(complete(c, 50)) == "cold-m"  # the new threshold routes 50 tokens to cold
        httpx.post(hot.url + "/resume")
        t.join(30)
        assert [r.status_code for r in box[0]] == [200] * 3
        assert served_by(complete(c, 10)) == "hot-m"
        assert "router_policy_version 3.0" in c.get("/metrics").text


async def _fairness(url: str, hot_url: str, rt: Any) -> list[tuple[str, int]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        def body(tokens: int) -> dict[str, Any]:
            return {"prompt": prompt(tokens), "max_tokens": 2}

        httpx.post(hot_url + "/pause")
        first = asyncio.ensure_future(c.post("/v1/completions", json=body(10)))
        while rt.router.pools["hot"][0].in_flight < 1:
            await asyncio.sleep(0.005)
        seq_before = rt.router.admission._seq
        long_one = asyncio.ensure_future(c.post("/v1/completions", json=body(800)))
        while rt.router.admission.queue_length("hot") < 1:
            await asyncio.sleep(0.005)
        shorts = []
        for i in range(8):
            shorts.append(asyncio.ensure_future(c.post("/v1/completions", json=body(5))))
            while rt.router.admission.queue_length("hot") < i + 2:
                await asyncio.sleep(0.005)
        httpx.post(hot_url + "/resume")
        done = await asyncio.gather(first, long_one, *shorts)
        assert [r.status_code for r in done] == [200] * 10
        return [(role, seq - seq_before) for role, seq in rt.router.admission.dispatch_log if seq > seq_before]


def test_fairness_window_serves_a_waiting_long_request_within_the_window() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url, max_in_flight=1,
                                                                  fairness_window=3) as rt:
        order = asyncio.run(_fairness(rt.url, hot.url, rt))
        seqs = [s for _, s in order]
        # seq 1 is the long request (arrived first); 2..9 are the short ones; 3 short ones pass it, no more.
        assert sorted(seqs) == list(range(1, 10))
        assert seqs.index(1) == 3, seqs
        assert seqs[:3] == [2, 3, 4] and seqs[4:] == [5, 6, 7, 8, 9]


def test_unauthenticated_or_malformed_policy_changes_are_refused_and_change_nothing() -> None:
    with engine("hot-m", "--max-model-len", "4096") as hot, engine("cold-m") as cold, \
            router(hot.url, cold.url) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        before = policy_doc(c)
        good = dict(before, batch_timeout_ms=50)
        assert c.put("/router/policy", json=good).status_code == 401
        assert c.put("/router/policy", json=good, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/router/policy").status_code == 401
        bad_cases: list[tuple[Any, str]] = [
            (dict(before, batch_timeout_ms=5000), "batch_timeout_ms"),
            (dict(before, batch_timeout_ms=-1), "batch_timeout_ms"),
            (dict(before, route_threshold_tokens=5000), "max_model_len"),  # hot's max_model_len is 4096
            (dict(before, length_limit_tokens=10**6), "max_model_len"),
            (dict(before, fairness_window="ten"), "fairness_window"),
            (dict(before, surprise=1), "unknown key"),
            (dict(before, upstreams={"hot": [{"url": "ftp://x"}], "cold": []}), "url"),
            (dict(before, upstreams={"hot": [{"url": hot.url, "state": "asleep"}]}), "state"),
            (dict(before, length_limit_tokens=100, length_limit_expires_at="yesterday"), "ISO 8601"),
            ([1, 2], "JSON object"),
        ]
        for doc, word in bad_cases:
            r = put(c, doc)
            assert r.status_code == 400, (doc, r.text)
            assert word in r.json()["error"]["message"], r.text
        r = c.put("/router/policy", content=b"{not json", headers=AUTH)
        assert r.status_code == 400 and "invalid JSON" in r.json()["error"]["message"]
        assert put(c, dict(before, version=99, batch_timeout_ms=50)).status_code == 409
        assert policy_doc(c) == before
        assert len(c.get("/router/policy/history", headers=AUTH).json()["history"]) == 1


def test_policy_api_is_off_without_a_token() -> None:
    with engine("hot-m") as hot, engine("cold-m") as cold, router(hot.url, cold.url, token=None) as rt:
        c = httpx.Client(base_url=rt.url, timeout=30)
        for r in (c.get("/router/policy"), c.put("/router/policy", json={}, headers=AUTH),
                  c.get("/router/policy/history", headers=AUTH)):
            assert r.status_code == 403
            assert "off" in r.json()["error"]["message"]


def test_policy_survives_a_router_restart(tmp_path: Any) -> None:
    path = str(tmp_path / "policy.json")
    with engine("hot-m") as hot, engine("cold-m") as cold:
        with router(hot.url, cold.url, policy_file=path) as rt:
            c = httpx.Client(base_url=rt.url, timeout=30)
            change(c, batch_timeout_ms=150, route_threshold_tokens=2000, length_limit_tokens=3000)
            version = policy_doc(c)["version"]
        with router(hot.url, cold.url, policy_file=path) as rt:
            c = httpx.Client(base_url=rt.url, timeout=30)
            doc = policy_doc(c)
            assert doc["version"] == version == 2
            assert (doc["batch_timeout_ms"], doc["route_threshold_tokens"], doc["length_limit_tokens"]) == \
                (150, 2000, 3000)
            assert served_by(complete(c, 1500)) == "hot-m"
            assert len(c.get("/router/policy/history", headers=AUTH).json()["history"]) == 2
