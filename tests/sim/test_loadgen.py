"""Load generator (sim/loadgen.py) and `doctor sim load` (sim/load_cli.py).

Happy paths run against the real sim engine; error paths use httpx.MockTransport servers that
misbehave on purpose. Assertions are on counts, statuses and ordering, never on exact timings.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.load_cli import build_parser, main
from sim.loadgen import (
    LoadProgress,
    LoadResult,
    RequestResult,
    format_summary,
    normalize_base_url,
    run_load,
    summarize,
)
from sim.testing import ALL_GRAPHED, running_engine
from sim.workload import RequestSpec, WorkloadSpec, generate

MODEL = "test-model"


def _specs(n: int, *, prompt: int = 32, output: int = 6, gap_s: float = 0.0) -> list[RequestSpec]:
    return [RequestSpec(i, i * gap_s, prompt + i, output + i % 3, False) for i in range(n)]


def _run(coro: Coroutine[Any, Any, LoadResult]) -> LoadResult:
    return asyncio.run(coro)


# --- against the sim engine -------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    # ALL_GRAPHED: no step runs eagerly, so none pays the modelled kernel warm-up; the tests stay short.
    argv = [MODEL, "--max-num-seqs", "8", "--max-model-len", "2048", *ALL_GRAPHED, "--port", "0"]
    with running_engine(argv) as url:
        yield url


def test_completions_stream_against_sim(engine_url: str) -> None:
    reqs = _specs(10)
    result = _run(run_load(engine_url, reqs, timeout_s=60, ignore_eos=True))
    assert result.model == MODEL  # discovered from /v1/models
    assert [r.index for r in result.results] == list(range(10))
    for spec, r in zip(reqs, result.results, strict=True):
        assert r.success, r.error
        assert r.status == 200
        assert r.output_tokens == spec.output_tokens  # ignore_eos: exactly max_tokens
        assert r.usage_prompt_tokens == spec.prompt_tokens  # token-id prompts have exact length
        assert r.ttft_s is not None and r.ttft_s > 0
        assert r.e2e_s is not None and r.e2e_s >= r.ttft_s
        assert len(r.itls_s) == r.output_tokens - 1
        assert all(x >= 0 for x in r.itls_s)
        assert r.finish_reason == "length"
    summary = summarize(result, goodput_slo={"e2el": 1e9})
    assert summary["completed"] == 10 and summary["failed"] == 0
    assert summary["total_output_tokens"] == sum(s.output_tokens for s in reqs)
    assert summary["request_goodput"] == pytest.approx(summary["request_throughput"])
    assert summary["mean_ttft_ms"] > 0 and summary["p99_itl_ms"] > 0
    assert "Serving Benchmark Result" in format_summary(summary)


def test_chat_against_sim(engine_url: str) -> None:
    reqs = _specs(4, prompt=20, output=5)
    result = _run(run_load(engine_url, reqs, model=MODEL, api="chat", timeout_s=60))
    for spec, r in zip(reqs, result.results, strict=True):
        assert r.success, r.error
        assert r.output_tokens == spec.output_tokens
        assert len(r.itls_s) == r.output_tokens - 1
        # The chat template adds a few tokens around the exact-length text.
        assert r.usage_prompt_tokens is not None and r.usage_prompt_tokens >= spec.prompt_tokens


def test_max_concurrency_and_classes_against_sim(engine_url: str) -> None:
    reqs = [RequestSpec(i, 0.0, 40 if i % 2 else 600, 4, bool(i % 2 == 0)) for i in range(8)]
    result = _run(run_load(engine_url, reqs, max_concurrency=2, timeout_s=60))
    assert all(r.success for r in result.results), [r.error for r in result.results]
    summary = summarize(result)
    assert summary["max_concurrent_requests"] <= 2
    assert summary["classes"]["long"]["completed"] == 4
    assert summary["classes"]["short"]["completed"] == 4


def test_prompt_longer_than_context_is_a_recorded_400(engine_url: str) -> None:
    reqs = [RequestSpec(0, 0.0, 30, 3, False), RequestSpec(1, 0.0, 5000, 3, True)]
    result = _run(run_load(engine_url, reqs, timeout_s=60))
    ok, too_long = result.results
    assert ok.success
    assert not too_long.success and too_long.status == 400 and too_long.error.startswith("HTTP 400")


def test_cli_against_sim(engine_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", engine_url + "/v1", "--rate", "inf", "--num-prompts", "6", "--prompt-median", "30"]
    argv += ["--output-median", "4", "--output-cap", "6", "--format", "json", "--quiet", "--timeout", "60"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["completed"] == 6 and summary["failed"] == 0 and summary["model"] == MODEL


# --- misbehaving servers (httpx.MockTransport) ------------------------------------------------

Handler = Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]


def _client(handler: Handler) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://mock")


def _sse(*events: object) -> bytes:
    return b"".join(
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events
    )


def _good_stream(n: int) -> bytes:
    chunks: list[object] = [{"choices": [{"index": 0, "text": f" w{i}"}]} for i in range(n)]
    chunks.append({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})  # not a token
    chunks.append({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n}})
    chunks.append(b"[DONE]")
    return _sse(*chunks)


def test_every_failure_is_recorded_not_raised() -> None:
    by_tokens: dict[int, httpx.Response] = {
        1: httpx.Response(400, json={"object": "error", "message": "bad prompt"}),
        2: httpx.Response(413, text="too large"),
        3: httpx.Response(429, text="slow down"),
        4: httpx.Response(500, text="boom"),
        5: httpx.Response(503, text="unavailable"),
        6: httpx.Response(200, content=_sse({"choices": [{"text": "a"}]}, b"{not json")),
        7: httpx.Response(200, content=_sse({"choices": [{"text": "a"}]})),  # no [DONE]
        8: httpx.Response(200, content=_sse({"error": {"message": "engine died"}}, b"[DONE]")),
        9: httpx.Response(200, content=_good_stream(9)),
    }

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "mocked"}]})
        body = json.loads(request.content)
        assert body["model"] == "mocked" and body["ignore_eos"] is True and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert isinstance(body["prompt"], list) and len(body["prompt"]) == 10
        return by_tokens[body["max_tokens"]]

    reqs = [RequestSpec(i, 0.0, 10, i + 1, False) for i in range(9)]
    result = _run(run_load("http://mock", reqs, client=_client(handler), ignore_eos=True))
    res = result.results
    assert [r.status for r in res] == [400, 413, 429, 500, 503, 200, 200, 200, 200]
    assert [r.success for r in res] == [False] * 8 + [True]
    assert res[0].error.startswith("HTTP 400") and "bad prompt" in res[0].error
    assert "unavailable" in res[4].error
    assert res[5].error.startswith("malformed SSE chunk")
    assert "[DONE]" in res[6].error
    assert "engine died" in res[7].error
    assert res[8].output_tokens == 9 and len(res[8].itls_s) == 8 and res[8].usage_prompt_tokens == 7
    summary = summarize(result)
    assert summary["completed"] == 1 and summary["failed"] == 8
    assert summary["errors"]["HTTP 429"] == 1
    assert "HTTP 503" in format_summary(summary)


def test_timeout_is_a_failure() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})

        async def slow() -> AsyncIterator[bytes]:
            yield _sse({"choices": [{"text": "a"}]})
            await asyncio.sleep(30)
            yield b""

        return httpx.Response(200, content=slow())

    result = _run(run_load("http://mock", _specs(2), client=_client(handler), timeout_s=0.2))
    assert all(not r.success and r.error.startswith("timed out") for r in result.results)
    assert all(r.e2e_s is not None and r.e2e_s >= 0.2 for r in result.results)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_refused_connection_is_recorded() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    result = _run(run_load(url, _specs(3), model="m", timeout_s=5))
    assert all(not r.success and r.status is None and "Connect" in r.error for r in result.results)
    discovery = _run(run_load(url, _specs(2), timeout_s=5))
    assert discovery.model is None
    assert all(r.error.startswith("model discovery failed") for r in discovery.results)


def test_requests_go_out_in_arrival_order_with_chat_payload() -> None:
    seen: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.url.path == "/v1/chat/completions"
        assert body["messages"][0]["role"] == "user"
        seen.append(body["max_completion_tokens"])
        deltas: list[object] = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]}]
        deltas += [{"choices": [{"delta": {"content": " x"}}]}] * body["max_completion_tokens"]
        return httpx.Response(200, content=_sse(*deltas, b"[DONE]"))  # no usage: count chunks

    reqs = [RequestSpec(i, t, 5, n, False) for i, (t, n) in enumerate([(0.06, 3), (0.0, 2), (0.03, 4)])]
    snapshots: list[LoadProgress] = []
    result = _run(
        run_load(
            "http://mock", reqs, model="m", api="chat", client=_client(handler), progress=snapshots.append,
            ignore_eos=True,
        )
    )
    assert seen == [2, 4, 3]
    assert [r.output_tokens for r in result.results] == [3, 2, 4]
    assert [len(r.itls_s) for r in result.results] == [2, 1, 3]  # the role-only chunk is not a token
    assert all(r.sent_s is not None and r.sent_s >= r.scheduled_s for r in result.results)
    last = snapshots[-1]
    assert (last.sent, last.completed, last.failed, last.in_flight) == (3, 3, 0, 0)


def test_non_streaming() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["stream"] is False and "stream_options" not in body
        answer = {"choices": [{"text": "x y", "finish_reason": "length"}], "usage": {"completion_tokens": 2}}
        return httpx.Response(200, json=answer)

    result = _run(run_load("http://mock", _specs(2), model="m", stream=False, client=_client(handler)))
    assert all(r.success and r.output_tokens == 2 and r.ttft_s == r.e2e_s for r in result.results)


# --- summary ----------------------------------------------------------------------------------


def _done(index: int, ttft: float, itls: list[float], long: bool = False) -> RequestResult:
    return RequestResult(
        index=index, long=long, prompt_tokens=100, max_tokens=len(itls) + 1, scheduled_s=0.0, sent_s=0.0,
        success=True, status=200, ttft_s=ttft, itls_s=itls, e2e_s=ttft + sum(itls),
        output_tokens=len(itls) + 1, chunks=len(itls) + 1,
    )  # fmt: skip


def test_summarize_matches_vllm_definitions() -> None:
    results = [
        _done(0, 0.1, [0.01, 0.03]),
        _done(1, 0.3, [0.02]),
        _done(2, 2.0, [0.05, 0.05, 0.05], long=True),
        RequestResult(3, long=True, prompt_tokens=9, max_tokens=3, scheduled_s=0.0, status=500, error="x"),
    ]
    summary = summarize(
        LoadResult("http://x", "m", "completions", True, None, 10.0, results),
        goodput_slo={"ttft": 500, "tpot": 40},
        percentiles=(50, 99),
    )
    assert (summary["completed"], summary["failed"]) == (3, 1)
    assert summary["total_input_tokens"] == 300 and summary["total_output_tokens"] == 9
    assert summary["request_throughput"] == pytest.approx(0.3)
    assert summary["output_throughput"] == pytest.approx(0.9)
    assert summary["mean_ttft_ms"] == pytest.approx(800)
    assert summary["median_ttft_ms"] == pytest.approx(300)
    assert summary["p99_ttft_ms"] == pytest.approx(300 + 1700 * 0.98)  # linear interpolation
    # TPOT = (E2E - TTFT) / (n - 1): 20 ms, 20 ms, 50 ms; ITLs are pooled.
    assert summary["mean_tpot_ms"] == pytest.approx(30)
    assert summary["mean_itl_ms"] == pytest.approx(1000 * 0.21 / 6)
    # Goodput: request 0 (ttft 100, tpot 20) and 1 (300, 20) meet both SLOs; 2 does not.
    assert summary["request_goodput"] == pytest.approx(0.2)
    assert summary["classes"]["long"]["completed"] == 1 and summary["classes"]["long"]["failed"] == 1
    assert summary["classes"]["short"]["mean_ttft_ms"] == pytest.approx(200)
    assert summary["errors"] == {"HTTP 500": 1}
    text = format_summary(summary)
    assert text.splitlines()[0] == "============ Serving Benchmark Result ============"
    assert "P50 TTFT (ms):" in text and "Request goodput (req/s):" in text and "Class: long" in text
    with pytest.raises(ValueError, match="unknown goodput metric"):
        summarize(LoadResult("http://x", "m", "completions", True, None, 1.0, results), goodput_slo={"x": 1})


def test_normalize_base_url() -> None:
    assert normalize_base_url("localhost:8000") == "http://localhost:8000"
    assert normalize_base_url("http://h:1/v1/") == "http://h:1"
    assert normalize_base_url("https://h") == "https://h"


# --- CLI errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--url", "http://x", "--rate", "-1"],
        ["--url", "http://x", "--duration", "5", "--num-prompts", "3"],
        ["--url", "http://x", "--arrival", "uniform"],
        ["--url", "http://x", "--long-share", "2"],
        ["--url", "http://x", "--step", "bad"],
        ["--url", "http://x", "--goodput", "ttft"],
        ["--url", "http://x", "--rate", "inf"],
        ["--url", "http://x", "--percentiles", "150"],
    ],
)
def test_cli_bad_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "doctor sim load: error:" in err and "Traceback" not in err


def test_cli_bad_trace_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,ten,1\n")
    assert main(["--url", "http://x", "--trace", str(trace)]) == 2
    assert f"{trace}:2: prompt_tokens is not a number" in capsys.readouterr().err


def test_cli_unreachable_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", f"http://127.0.0.1:{_closed_port()}", "--num-prompts", "2", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach" in err and "Traceback" not in err


def test_cli_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    flags = ("--url", "--rate", "--burstiness", "--long-share", "--trace", "--max-concurrency", "--format")
    assert all(flag in out for flag in flags)


def test_generated_workload_runs_through_mock() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_good_stream(json.loads(request.content)["max_tokens"]))

    reqs = generate(WorkloadSpec(rate_qps=200, num_requests=20, output_median=4, prefix_share=0.5, seed=1))
    result = _run(run_load("http://mock", reqs, model="m", client=_client(handler), ignore_eos=True))
    assert all(r.success for r in result.results)
    assert [r.output_tokens for r in result.results] == [s.output_tokens for s in reqs]


# --- natural finishes (EOS at the drawn length) against --ignore-eos ------------------------------


def _success_by_reason(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "vllm:request_success_total":
                out[s.labels["finished_reason"]] = out.get(s.labels["finished_reason"], 0.0) + s.value
    return out


@pytest.mark.parametrize("version", ["0.33", "0.8"])
def test_requests_end_by_eos_at_their_drawn_length_by_default(version: str) -> None:
    argv = [MODEL, "--max-num-seqs", "8", "--enforce-eager", "--port", "0", "--vllm-version", version]
    reqs = _specs(6)
    with running_engine(argv) as url:
        natural = _run(run_load(url, reqs, timeout_s=60))
        after_natural = _success_by_reason(url)
        capped = _run(run_load(url, reqs, timeout_s=60, ignore_eos=True))
        after_capped = _success_by_reason(url)
    for spec, r in zip(reqs, natural.results, strict=True):
        assert r.success and r.finish_reason == "stop" and r.output_tokens == spec.output_tokens
    assert after_natural.get("stop") == 6 and after_natural.get("length", 0) == 0
    assert all(r.finish_reason == "length" and r.output_tokens == s.output_tokens
               for s, r in zip(reqs, capped.results, strict=True))
    assert after_capped.get("length") == 6


def test_load_cli_has_ignore_eos() -> None:
    assert build_parser().parse_args(["--url", "http://x", "--ignore-eos"]).ignore_eos is True
    assert build_parser().parse_args(["--url", "http://x"]).ignore_eos is False


def test_the_one_percentile_is_statistics_quantiles_inclusive_at_its_cut_points() -> None:
    import random
    import statistics

    from sim.loadgen_summary import percentile

    rng = random.Random(5)
    for n in (2, 3, 10, 101, 997):
        xs = [rng.expovariate(1.0) for _ in range(n)]
        cuts = statistics.quantiles(xs, n=100, method="inclusive")
        for q in (1, 25, 50, 90, 99):
            assert abs(percentile(xs, q) - cuts[q - 1]) < 1e-12, (n, q)
    assert percentile([], 99) == 0.0 and percentile([3.0], 99.9) == 3.0
