"""The sim engine over real HTTP on loopback: API shapes, /metrics per profile, logs, errors, faults."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.profiles import PROFILES
from sim.testing import ALL_GRAPHED, engine_thread

FAST = [*ALL_GRAPHED, "--time-scale", "0.1"]
# The prefix of every vLLM release's log lines, from vllm/logger.py's format strings.
LINE_PREFIX = re.compile(
    r"^(?:(?:\x1b\[1;36m)?\((?P<proc>\w+) pid=\d+\)(?:\x1b\[0;0m)? )?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[?(?P<file>[\w/.]+):\d+\] (?P<msg>.*)$"
)
ACCESS = re.compile(r'INFO:     (?P<client>[\d.]+):\d+ - "(?P<method>\w+) (?P<path>\S+) HTTP/1.1" (?P<status>\d{3}) ')


def _families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def _sample(text: str, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"{name}{labels} not in scrape")


def test_completion_chat_and_streaming_shapes() -> None:
    with engine_thread(["m", *FAST]) as eng, httpx.Client(base_url=eng.url, timeout=30) as c:
        r = c.post("/v1/completions", json={"model": "m", "prompt": "hello there", "max_tokens": 7})
        body = r.json()
        assert r.status_code == 200 and body["object"] == "text_completion"
        assert body["usage"] == {"prompt_tokens": 2, "total_tokens": 9, "completion_tokens": 7,
                                 "prompt_tokens_details": None}
        assert body["choices"][0]["finish_reason"] == "length"
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                 "max_tokens": 3})
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
        chunks = []
        payload = {"model": "m", "prompt": [5] * 30, "max_tokens": 6, "stream": True,
                   "stream_options": {"include_usage": True}}
        with c.stream("POST", "/v1/completions", json=payload) as s:
            assert s.headers["content-type"].startswith("text/event-stream")
            for line in s.iter_lines():
                if line.startswith("data: "):
                    chunks.append(line[6:])
        assert chunks[-1] == "[DONE]"
        payloads = [json.loads(x) for x in chunks[:-1]]
        texts = [p for p in payloads if p["choices"]]
        assert len(texts) == 6  # one chunk per token, finish_reason on the last token's chunk
        assert texts[-1]["choices"][0]["finish_reason"] == "length"
        assert all(p["choices"][0]["finish_reason"] is None for p in texts[:-1])
        assert payloads[-1]["usage"]["completion_tokens"] == 6 and payloads[-1]["choices"] == []
        assert c.get("/v1/models").json()["data"][0]["max_model_len"] == 32768
        assert c.post("/tokenize", json={"prompt": "a b c"}).json()["count"] == 3


@pytest.mark.parametrize("profile", ["0.6", "0.8", "0.10", "0.11", "0.33"])
def test_metrics_scrape_per_profile(profile: str) -> None:
    with engine_thread(["m", *FAST, "--vllm-version", profile]) as eng, httpx.Client(base_url=eng.url) as c:
        for _ in range(3):
            c.post("/v1/completions", json={"prompt": "x y z", "max_tokens": 4})
        r = c.get("/metrics", headers={"Accept": "text/plain"})
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        fams = _families(r.text)
        p = PROFILES[profile]
        assert fams["vllm:num_requests_running"] == "gauge"
        assert fams["vllm:e2e_request_latency_seconds"] == "histogram"
        assert fams["vllm:iteration_tokens_total"] == "histogram"
        assert ("vllm:kv_cache_usage_perc" in fams) == p.kv_usage_new
        assert ("vllm:gpu_cache_usage_perc" in fams) == p.kv_usage_old
        assert ("vllm:inter_token_latency_seconds" in fams) == p.itl_histogram
        assert ("vllm:num_preemptions" in fams) and fams["vllm:num_preemptions"] == "counter"
        assert _sample(r.text, "vllm:request_success_total", finished_reason="length") == 3
        assert _sample(r.text, "vllm:generation_tokens_total") == 12
        le = [s.labels["le"] for f in text_string_to_metric_families(r.text)
              if f.name == "vllm:time_to_first_token_seconds" for s in f.samples if s.name.endswith("_bucket")]
        assert [float(x) for x in le] == [*p.ttft_buckets, float("inf")]
        labels = next(s.labels for f in text_string_to_metric_families(r.text)
                      if f.name == "vllm:num_requests_running" for s in f.samples)
        assert set(labels) == ({"model_name", "engine"} if p.v1 else {"model_name"})
        assert ("vllm:num_preemptions_created" in r.text) == p.created_series


def test_logs_parse_with_vllm_format_regexes() -> None:
    with engine_thread(["m", *FAST, "--vllm-version", "0.10"]) as eng, httpx.Client(base_url=eng.url) as c:
        c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        c.post("/v1/completions", json={"prompt": "x" * 10, "max_tokens": 2, "model": "nope"})
        logs = eng.logs
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in logs]
    vllm_lines = [LINE_PREFIX.match(line) for line in plain if " INFO:     " not in line]
    assert all(vllm_lines), [line for line in plain if not LINE_PREFIX.match(line) and " INFO:     " not in line]
    assert any(m and m["msg"].startswith("vLLM API server version 0.10.2") for m in vllm_lines)
    accesses = [ACCESS.search(line) for line in plain if "HTTP/1.1" in line]
    assert [(a["method"], a["path"], a["status"]) for a in accesses if a] == [
        ("POST", "/v1/completions", "200"), ("POST", "/v1/completions", "404")]
    assert any("\x1b[1;36m(APIServer pid=" in line for line in logs)  # 0.10 colours the process prefix


@pytest.mark.parametrize(("profile", "nested"), [("0.8", False), ("0.33", True)])
def test_bad_requests_get_vllm_errors(profile: str, nested: bool) -> None:
    with engine_thread(["m", *FAST, "--vllm-version", profile, "--max-model-len", "1024"]) as eng, \
            httpx.Client(base_url=eng.url) as c:
        cases = [
            c.post("/v1/completions", content=b"{not json"),
            c.post("/v1/completions", json={"max_tokens": 3}),
            c.post("/v1/completions", json={"prompt": [1] * 2000}),
            c.post("/v1/completions", json={"prompt": [1] * 1000, "max_tokens": 100}),
            c.post("/v1/completions", json={"prompt": "x", "max_tokens": "many"}),
            c.post("/v1/chat/completions", json={"messages": "hello"}),
        ]
        for r in cases:
            assert r.status_code == 400, r.text
            body = r.json()
            err = body["error"] if nested else body
            assert err["code"] == 400 and err["type"] == "BadRequestError" and err["message"]
            assert "Traceback" not in r.text
        too_long = cases[2].json()
        msg = too_long["error"]["message"] if nested else too_long["message"]
        assert "maximum context length is 1024 tokens" in msg
        r = c.post("/v1/completions", json={"prompt": "x", "model": "other"})
        assert r.status_code == 404
        assert c.get("/no/such/route").json() == {"detail": "Not Found"}
        # The server is still fine after all that.
        assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


def test_client_disconnect_aborts_request() -> None:
    with engine_thread(["m", *FAST]) as eng:
        with httpx.Client(base_url=eng.url) as c, c.stream(
                "POST", "/v1/completions", json={"prompt": "x", "max_tokens": 5000, "stream": True}) as s:
            for _ in zip(range(3), s.iter_lines(), strict=False):
                pass
        core = eng.handle.runtime.core if eng.handle else None
        assert core is not None
        deadline = time.monotonic() + 10
        while core.metrics.request_success.get("abort", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert core.metrics.request_success["abort"] == 1
        assert core.metrics.running == 0


def test_dev_endpoints_only_in_dev_mode() -> None:
    with engine_thread(["m", *FAST]) as eng, httpx.Client(base_url=eng.url) as c:
        assert c.post("/sleep?level=1").status_code == 404
        assert c.post("/reset_prefix_cache").status_code == 404
    with engine_thread(["m", *FAST, "--enable-sleep-mode"], env={"VLLM_SERVER_DEV_MODE": "1"}) as eng, \
            httpx.Client(base_url=eng.url) as c:
        assert c.post("/reset_prefix_cache").status_code == 200
        assert c.post("/sleep?level=1").json() == {"status": "sleeping", "level": 1}
        assert c.get("/is_sleeping").json() == {"is_sleeping": True}
        assert _sample(c.get("/metrics").text, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1
        assert c.post("/wake_up").status_code == 200
        assert c.get("/is_sleeping").json() == {"is_sleeping": False}
        assert any("Sleep mode freed" in line for line in eng.logs)
        info = c.get("/server_info?config_format=json").json()["vllm_config"]
        assert info["scheduler_config"]["max_num_seqs"] == 256


def test_engine_death_over_http() -> None:
    env = {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
    with engine_thread(["m", *FAST, "--sim-fault-endpoint", "--vllm-version", "0.11"], env=env) as eng, \
            httpx.Client(base_url=eng.url, timeout=30) as c:
        assert c.get("/health").status_code == 200
        assert c.post("/sim/fault", json={"fault": "engine-death"}).status_code == 200
        assert c.get("/health").status_code == 503
        r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
        assert r.status_code == 500 and r.json()["error"]["type"] == "InternalServerError"
        assert c.post("/sim/fault", json={"fault": "nonsense"}).status_code == 400
    assert any("EngineDeadError" in line for line in eng.logs)


def test_dead_engine_shuts_the_server_down_without_keep_alive() -> None:
    with engine_thread(["m", *FAST, "--fault", "engine-death@0.2"]) as eng:
        deadline = time.monotonic() + 20
        while eng._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not eng._thread.is_alive()
        with pytest.raises(httpx.TransportError):
            httpx.get(eng.url + "/health", timeout=2)


def test_dcgm_port_serves_gpu_metrics() -> None:
    with engine_thread(["m", *FAST, "--dcgm-port", "0"]) as eng:
        assert eng.handle is not None and eng.handle.dcgm_port
        text = httpx.get(f"http://127.0.0.1:{eng.handle.dcgm_port}/metrics").text
    fams = _families(text)
    assert fams["DCGM_FI_PROF_DRAM_ACTIVE"] == "gauge"
    used = _sample(text, "DCGM_FI_DEV_FB_USED", gpu="0")
    free = _sample(text, "DCGM_FI_DEV_FB_FREE", gpu="0")
    assert used + free == pytest.approx(80 * 1024, abs=2)
    assert used == pytest.approx(0.92 * 80 * 1024, rel=0.01)  # 0.33 reserves 0.92 of the GPU


def test_slow_metrics_fault_delays_scrape() -> None:
    with engine_thread(["m", *FAST, "--fault", "slow-metrics:3"]) as eng:
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(eng.url + "/metrics", timeout=0.5)
        assert httpx.get(eng.url + "/health", timeout=2).status_code == 200
