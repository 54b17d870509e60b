"""collectors.logs: vLLM log lines of every release parsed, events recognised, files followed like tail -F."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collectors.logevents import recognize
from collectors.logparse import clock_to_epoch, parse_line, parse_stats, strip_ansi
from collectors.logs import LogScan, scan_file
from sim.logfmt import LogFormatter, StartupInfo
from sim.profiles import PROFILE_NAMES, get_profile

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1024**3
MIB = 1024**2


def _scan(version: str) -> LogScan:
    scan = scan_file(FIXTURES / f"logs_{version}.txt", engine="hot", year=2025)
    assert scan.error is None
    return scan


def _events(scan: LogScan, kind: str) -> list[dict[str, Any]]:
    return [dict(e.details) for e in scan.events if e.kind == kind]


def _config(scan: LogScan) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for details in _events(scan, "startup_config"):
        merged.update({k: v for k, v in details.items() if k not in ("logged_by", "logged_by_pid")})
    return merged


def _sub(d: dict[str, Any], **expected: Any) -> None:
    for key, value in expected.items():
        assert key in d, f"{key} missing from {d}"
        if isinstance(value, float):
            assert d[key] == pytest.approx(value, rel=1e-9), key
        else:
            assert d[key] == value, key


# --- parse_line: prefixes of every release ------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "kind", "level", "process", "pid", "source", "lineno", "message"),
    [
        ("INFO 10-28 11:16:34 metrics.py:467] hello", "vllm", "INFO", None, None, "metrics.py", 467, "hello"),
        ("WARNING 05-02 10:00:00 [loggers.py:111] hi there", "vllm", "WARNING", None, None, "loggers.py", 111,
         "hi there"),
        ("\x1b[1;36m(APIServer pid=4021)\x1b[0;0m INFO 09-12 14:03:10 [loggers.py:123] x", "vllm", "INFO",
         "APIServer", 4021, "loggers.py", 123, "x"),
        ("(EngineCore_DP0 pid=2911) ERROR 03-13 09:00:43 [core.py:720] boom", "vllm", "ERROR", "EngineCore_DP0",
         2911, "core.py", 720, "boom"),
        ("(VllmWorker TP0 pid=7) DEBUG 11-30 08:12:00 [v1/metrics/loggers.py:283] dbg", "vllm", "DEBUG",
         "VllmWorker TP0", 7, "v1/metrics/loggers.py", 283, "dbg"),
        ('INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK', "access", "INFO", None, None, None,
         None, '127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK'),
        ("(APIServer pid=1) INFO:     Shutting down", "raw", "INFO", "APIServer", 1, None, None, "Shutting down"),
        ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog", "raw", None, None, None, None, None,
         "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog"),
    ],
)
def test_parse_line_layouts(line: str, kind: str, level: str | None, process: str | None, pid: int | None,
                            source: str | None, lineno: int | None, message: str) -> None:
    p = parse_line(line)
    assert p is not None
    assert (p.kind, p.level, p.process, p.pid, p.source, p.lineno, p.message) == (
        kind, level, process, pid, source, lineno, message)


def test_parse_line_timestamp_prefix_and_access_fields() -> None:
    p = parse_line("[node-3] INFO 01-20 09:15:40 [loggers.py:236] msg", year=2025)
    assert p is not None and p.prefix == "[node-3]" and p.ts_text == "01-20 09:15:40"
    assert p.timestamp == clock_to_epoch("01-20 09:15:40", 2025) == 1737364540.0
    q = parse_line("\x1b[1;36m(APIServer pid=9)\x1b[0;0m [pfx] INFO 01-20 09:15:40 [a.py:1] m", year=2025)
    assert q is not None and (q.process, q.pid, q.prefix, q.message) == ("APIServer", 9, "[pfx]", "m")
    assert parse_line("INFO 01-20 09:15:40 [a.py:1] m").timestamp is None  # type: ignore[union-attr]
    assert clock_to_epoch("02-30 00:00:00", 2025) is None
    a = parse_line('(APIServer pid=1) INFO:     10.1.6.81:16983 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request')
    assert a is not None and (a.kind, a.client, a.method, a.path, a.status) == (
        "access", "10.1.6.81:16983", "POST", "/v1/chat/completions", 400)
    assert parse_line("") is None and parse_line("   \n") is None
    assert strip_ansi("\x1b[31mred\x1b[0m \x1b]0;title\x07x") == "red x"


def test_parse_line_json() -> None:
    line = json.dumps({"asctime": "01-20 09:15:40", "levelname": "INFO", "name": "vllm.v1.metrics.loggers",
                       "processName": "EngineCore_DP0", "process": 4100, "message": "Engine 000: Running: 3 reqs"})
    p = parse_line(line, year=2025)
    assert p is not None
    assert (p.kind, p.level, p.logger, p.process, p.pid, p.timestamp) == (
        "json", "INFO", "vllm.v1.metrics.loggers", "EngineCore_DP0", 4100, 1737364540.0)
    assert parse_stats(p.message) == {"running": 3.0, "engine": 0.0}
    iso = parse_line('{"asctime": "2025-01-20 09:15:40,250", "levelname": "ERROR", "message": "m"}')
    assert iso is not None and iso.timestamp == pytest.approx(1737364540.25)
    broken = parse_line('{"levelname": "INFO", "message": "unterminated"')
    assert broken is not None and broken.kind == "raw"


# --- parse_stats: every format ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Avg prompt throughput: 1523.4 tokens/s, Avg generation throughput: 812.7 tokens/s, Running: 42 reqs, "
         "Swapped: 1 reqs, Pending: 7 reqs, GPU KV cache usage: 87.3%, CPU KV cache usage: 2.5%.",
         {"prompt_tps": 1523.4, "gen_tps": 812.7, "running": 42, "swapped": 1, "waiting": 7, "kv_usage": 0.873,
          "cpu_kv_usage": 0.025}),
        ("Prefix cache hit rate: GPU: 31.25%, CPU: 0.00%", {"prefix_hit_rate": 0.3125, "cpu_prefix_hit_rate": 0.0}),
        ("Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 239.2 tokens/s, Running: 8 "
         "reqs, Waiting: 0 reqs, GPU KV cache usage: 91.2%, Prefix cache hit rate: 0.0%",
         {"engine": 0, "prompt_tps": 0.0, "gen_tps": 239.2, "running": 8, "waiting": 0, "kv_usage": 0.912,
          "prefix_hit_rate": 0.0}),
        ("Engine 003: Running: 1 reqs, Preemptions: 9, Waiting: 61 reqs, XPU KV cache usage: 98.7%",
         {"engine": 3, "running": 1, "preemptions": 9, "waiting": 61, "kv_usage": 0.987}),
        ("4 Engines Aggregated: Avg prompt throughput: 9001.2 tokens/s, Avg generation throughput: 12010.9 tokens/s,"
         " Running: 512 reqs, Waiting: 0 reqs, Deferred: 5 reqs, GPU KV cache usage: 63.5%, Prefix cache hit rate: "
         "70.1%, External prefix cache hit rate: 5.0%, MM cache hit rate: 66.7%, Corrupted: 2 reqs",
         {"engines_aggregated": 4, "prompt_tps": 9001.2, "gen_tps": 12010.9, "running": 512, "waiting": 0,
          "deferred": 5, "kv_usage": 0.635, "prefix_hit_rate": 0.701, "external_prefix_hit_rate": 0.05,
          "mm_cache_hit_rate": 0.667, "corrupted": 2}),
        ("Engine 000: Avg prompt throughput: 1.0 tokens/s, Running: 2 reqs, KV fetch: 2 waiting to start, 1 in "
         "progress, 0 completed waiting, GPU KV cache usage: 1.0%",
         {"engine": 0, "prompt_tps": 1.0, "running": 2, "kv_fetch_waiting": 2, "kv_fetch_in_progress": 1,
          "kv_fetch_completed_waiting": 0, "kv_usage": 0.01}),
    ],
)
def test_parse_stats_formats(message: str, expected: dict[str, float]) -> None:
    got = parse_stats(message)
    assert got is not None
    assert got == pytest.approx({k: float(v) for k, v in expected.items()})


@pytest.mark.parametrize(
    "message",
    [
        "Engine 000: Iteration(812): 2 context requests, 4096 context tokens, GPU KV cache usage: 91.0%",
        "SpecDecoding metrics: Mean acceptance length: 2.41, Accepted throughput: 310.55 tokens/s, Drafted "
        "throughput: 662.10 tokens/s, Avg Draft acceptance rate: 46.9%",
        "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 7680",
        "Added request chatcmpl-1.",
    ],
)
def test_parse_stats_rejects_other_lines(message: str) -> None:
    assert parse_stats(message) is None


# --- hand-written fixtures per release ----------------------------------------------------------------
def test_fixture_06_v0() -> None:
    s = _scan("0.6")
    assert [p.values for p in s.stats] == [
        pytest.approx({"prompt_tps": 1523.4, "gen_tps": 812.7, "running": 42, "swapped": 0, "waiting": 7,
                       "kv_usage": 0.873, "cpu_kv_usage": 0.0, "prefix_hit_rate": 0.3125, "cpu_prefix_hit_rate": 0}),
        pytest.approx({"prompt_tps": 0.0, "gen_tps": 1650.2, "running": 38, "swapped": 2, "waiting": 19,
                       "kv_usage": 0.991, "cpu_kv_usage": 0.045}),
    ]
    assert s.stats[0].timestamp == clock_to_epoch("10-28 11:16:34", 2025)
    cfg = _config(s)
    _sub(cfg, version="0.6.6.post1", max_num_batched_tokens=2048, num_gpu_blocks=26784, num_cpu_blocks=2048,
         max_concurrency=26.16, max_concurrency_tokens=16384, engine_generation="V0")
    _sub(cfg["args"], max_model_len=16384, tensor_parallel_size=2, gpu_memory_utilization=0.85, max_num_seqs=128,
         host=None)
    _sub(cfg["engine_config"], max_seq_len=16384, enable_prefix_caching=True, dtype="torch.bfloat16")
    (pre,) = _events(s, "preemption")
    _sub(pre, mode="RECOMPUTE", total_preemptions=51, request_id="chat-55b8bdce")
    (ctx,) = _events(s, "prompt_too_long")
    _sub(ctx, max_model_len=16384, requested_tokens=17000, prompt_tokens=16500, max_tokens=500, variant="v06")
    assert s.counts["http_400"] == 2  # two 400s on generation routes; the /v1/models one is not counted
    assert s.counts["events.prompt_too_long"] == 1  # a 400 alone is not a too-long prompt
    (oom,) = _events(s, "cuda_oom")  # printed twice within a second: one event
    _sub(oom, tried_bytes=2.0 * GIB, total_bytes=79.15 * GIB, free_bytes=1.06 * GIB, allocated_bytes=75.5 * GIB,
         reserved_unallocated_bytes=1.88 * GIB, gpu=0, fragmentation_hint=True)
    deaths = _events(s, "engine_death")
    assert [d["signal"] for d in deaths] == ["engine_loop_died", "mq_engine_dead"]
    assert s.counts["http_5xx"] == 1


def test_fixture_08() -> None:
    s = _scan("0.8")
    assert [p.values for p in s.stats] == [
        pytest.approx({"engine": 0, "prompt_tps": 0.0, "gen_tps": 239.2, "running": 8, "waiting": 0,
                       "kv_usage": 0.912, "prefix_hit_rate": 0.0}),
        pytest.approx({"engine": 0, "prompt_tps": 4096.5, "gen_tps": 310.0, "running": 12, "waiting": 3,
                       "kv_usage": 0.975, "prefix_hit_rate": 0.125}),
    ]
    cfg = _config(s)
    _sub(cfg, version="0.8.5.post1", max_num_batched_tokens=8192, kv_cache_tokens=312496, max_concurrency=9.54,
         max_concurrency_tokens=32768, weights_bytes=14.2488 * GIB, model_load_s=4.901234, init_s=24.61,
         listen="http://0.0.0.0:8000", engine_generation="V1")
    _sub(cfg["args"], max_model_len=32768, max_num_seqs=256)
    _sub(cfg["engine_config"], tensor_parallel_size=1, enable_prefix_caching=True)
    assert {"route": "/sleep", "methods": "POST"}.items() <= _events(s, "startup_config")[9].items()
    sleeps = _events(s, "sleep")
    _sub(sleeps[0], seconds=2.418)
    _sub(sleeps[1], freed_bytes=61.25 * GIB, still_in_use_bytes=1.48 * GIB)
    (wake,) = _events(s, "wake_up")
    _sub(wake, seconds=1.25, tags="['weights']")
    nccl = _events(s, "nccl_error")
    _sub(nccl[0], signal="watchdog_timeout", rank=0, seq=9001, op="ALLGATHER", timeout_s=1800.0, ran_s=1800.123)
    assert [n["signal"] for n in nccl] == ["watchdog_timeout", "process_down", "nccl_error"]
    assert nccl[2]["error"] == "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
    deaths = _events(s, "engine_death")
    assert [d["signal"] for d in deaths] == ["core_fatal_error", "engine_dead_error"]
    assert deaths[0]["cause"].startswith("RuntimeError: NCCL error: unhandled cuda error")
    assert s.counts["http_400"] == 1 and s.counts["http_5xx"] == 1 and s.counts["http_2xx"] == 2


def test_fixture_010_ansi() -> None:
    s = _scan("0.10")
    assert [(p.process, p.values) for p in s.stats] == [
        ("APIServer", pytest.approx({"engine": 0, "prompt_tps": 2411.6, "gen_tps": 538.2, "running": 37,
                                     "waiting": 4, "kv_usage": 0.714, "prefix_hit_rate": 0.439})),
        ("APIServer", pytest.approx({"engine": 0, "prompt_tps": 0.0, "gen_tps": 1102.4, "running": 41, "waiting": 0,
                                     "kv_usage": 0.8, "prefix_hit_rate": 0.441})),
    ]
    cfg = _config(s)
    _sub(cfg, version="0.10.2", max_model_len=8192, max_num_batched_tokens=4096, kv_cache_memory_bytes=18.75 * GIB,
         kv_cache_tokens=122880, max_concurrency=15.0, max_concurrency_tokens=8192, num_gpu_blocks=7680)
    assert cfg["non_default_args"] == {
        "model_tag": "meta-llama/Llama-3.1-70B-Instruct", "max_model_len": 8192, "tensor_parallel_size": 2,
        "max_num_seqs": 64, "gpu_memory_utilization": 0.92, "enable_prefix_caching": True}
    ctx = _events(s, "prompt_too_long")
    _sub(ctx[0], variant="max_tokens", max_tokens=2048, max_model_len=8192, prompt_tokens=7000)
    _sub(ctx[1], variant="engine", prompt_tokens=9120, max_model_len=8192)
    assert s.counts["http_400"] == 2
    deaths = _events(s, "engine_death")
    _sub(deaths[0], signal="core_died", process="EngineCore_0", logged_by="APIServer", logged_by_pid=4021)
    _sub(deaths[1], signal="startup_failed", phase="startup")
    (kv,) = _events(s, "startup_oom")
    _sub(kv, reason="kv_too_small_for_max_len", max_model_len=131072, needed_bytes=16.0 * GIB,
         available_bytes=9.87 * GIB, estimated_max_model_len=80768, logged_by="EngineCore_0")


def test_fixture_011() -> None:
    s = _scan("0.11")
    (p,) = s.stats
    assert p.values == pytest.approx({"engine": 0, "prompt_tps": 820.0, "gen_tps": 2950.7, "running": 96,
                                      "waiting": 12, "kv_usage": 0.996, "prefix_hit_rate": 0.083})
    cfg = _config(s)
    _sub(cfg, version="0.11.0", max_model_len=32768, kv_cache_tokens=245760, max_concurrency=7.5)
    # A value that is not a Python literal fails soft: the rest of the dict survives, the odd value stays text.
    assert cfg["non_default_args"] == {
        "model_tag": "mistralai/Mistral-7B-Instruct-v0.3", "port": 8001, "max_num_seqs": 128,
        "max_num_batched_tokens": 16384, "served_model_name": ["mistral"],
        "compilation_config": "CompilationConfig(level=3, use_inductor=True)"}
    deaths = _events(s, "engine_death")
    assert [(d["signal"], d.get("process")) for d in deaths] == [
        ("worker_died", "VllmWorker-1"), ("core_died", "EngineCore_DP0"), ("startup_failed", None)]
    assert "exit_code" not in deaths[0]
    (oom,) = _events(s, "startup_oom")
    _sub(oom, reason="free_memory_at_startup", free_bytes=10.5 * GIB, total_bytes=79.19 * GIB,
         gpu_memory_utilization=0.9, requested_bytes=71.27 * GIB)


def test_fixture_012_prefix_and_json() -> None:
    s = _scan("0.12")
    assert [p.values for p in s.stats] == [
        pytest.approx({"engine": 0, "prompt_tps": 6120.3, "gen_tps": 1402.8, "running": 128, "waiting": 61,
                       "preemptions": 9, "kv_usage": 0.987, "prefix_hit_rate": 0.12}),
        pytest.approx({"engine": 0, "prompt_tps": 512.0, "gen_tps": 2200.5, "running": 120, "waiting": 70,
                       "kv_usage": 0.97, "prefix_hit_rate": 0.115, "external_prefix_hit_rate": 0.05,
                       "mm_cache_hit_rate": 0.667}),
        pytest.approx({"engine": 0, "prompt_tps": 100.0, "gen_tps": 900.0, "running": 64, "waiting": 2,
                       "kv_usage": 0.555, "prefix_hit_rate": 0.2}),
    ]
    assert s.stats[2].timestamp == clock_to_epoch("01-20 09:16:00", 2025)
    assert s.counts["json"] == 3 and s.counts["unparsed"] == 1
    _sub(_config(s), version="0.12.0", max_num_batched_tokens=8192)
    (sleep,) = _events(s, "sleep")
    _sub(sleep, freed_bytes=60.0 * GIB, still_in_use_bytes=2.0 * GIB, logged_by="EngineCore_DP0", logged_by_pid=4100)
    (wake,) = _events(s, "wake_up")
    _sub(wake, seconds=0.75, tags="['weights', 'kv_cache']")
    (nccl,) = _events(s, "nccl_error")
    _sub(nccl, signal="nccl_error", error="remote process exited or there was a network error")


def test_fixture_020_runtime_oom_death() -> None:
    s = _scan("0.20")
    assert [p.values for p in s.stats] == [
        pytest.approx({"engine": 0, "prompt_tps": 850.0, "gen_tps": 3010.4, "running": 64, "waiting": 12,
                       "deferred": 3, "kv_usage": 0.91, "prefix_hit_rate": 0.552}),
        pytest.approx({"engines_aggregated": 2, "prompt_tps": 9001.2, "gen_tps": 12010.9, "running": 256,
                       "waiting": 0, "kv_usage": 0.635, "prefix_hit_rate": 0.701}),
    ]
    cfg = _config(s)
    _sub(cfg, version="0.20.2", model="meta-llama/Llama-3.1-8B-Instruct")
    _sub(cfg["non_default_args"], max_num_seqs=128, data_parallel_size=2)
    (oom,) = _events(s, "cuda_oom")
    _sub(oom, tried_bytes=1.16 * GIB, gpu=0, total_bytes=79.19 * GIB, free_bytes=612.0 * MIB,
         in_use_bytes=78.57 * GIB, allocated_bytes=74.10 * GIB, private_pools_bytes=1.02 * GIB,
         reserved_unallocated_bytes=2.31 * GIB, fragmentation_hint=True,
         fragmentation_ratio=2.31 / (2.31 + 74.10))
    deaths = _events(s, "engine_death")
    assert [d["signal"] for d in deaths] == ["core_fatal_error", "engine_dead_error"]
    assert deaths[0]["cause"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert s.counts["http_5xx"] == 1
    assert s.events[2].timestamp == clock_to_epoch("05-12 01:48:40", 2025)


def test_fixture_033() -> None:
    s = _scan("0.33")
    assert [p.values for p in s.stats] == [
        pytest.approx({"engine": 0, "prompt_tps": 0.0, "gen_tps": 0.0, "running": 0, "waiting": 0, "kv_usage": 0.0}),
        pytest.approx({"engine": 0, "prompt_tps": 850.0, "gen_tps": 3010.4, "running": 64, "waiting": 12,
                       "kv_fetch_waiting": 2, "kv_fetch_in_progress": 1, "kv_fetch_completed_waiting": 0,
                       "preemptions": 4, "kv_usage": 0.91, "prefix_hit_rate": 0.552, "corrupted": 1}),
    ]
    cfg = _config(s)
    _sub(cfg, version="0.33.0", model="Qwen/Qwen3-32B", max_model_len=40960, max_num_batched_tokens=16384,
         kv_cache_tokens=428544, max_concurrency_tokens=40960, max_concurrency=10.46, init_s=41.77, compile_s=18.02)
    _sub(cfg["non_default_args"], api_key="***", max_num_seqs=96, gpu_memory_utilization=0.88)
    ctx = _events(s, "prompt_too_long")
    _sub(ctx[0], variant="input", max_model_len=40960, prompt_tokens=41000)
    _sub(ctx[1], variant="chars", prompt_chars=500000, max_chars=163840, chars_bound_tokens=40960)
    assert s.counts["http_400"] == 1  # /v1/responses is a generation route
    (timeout,) = _events(s, "model_timeout")
    assert timeout["rpc"] == "execute_model"
    deaths = _events(s, "engine_death")
    assert [d["signal"] for d in deaths] == ["worker_died", "core_exited", "startup_failed"]
    _sub(deaths[0], process="VllmWorker-1", exit_code=-9, exit_signal="SIGKILL")
    assert deaths[2]["failed_procs"] == {"EngineCore": 1}
    (load,) = _events(s, "startup_oom")
    _sub(load, reason="model_load", tried_bytes=500.0 * MIB, total_bytes=79.19 * GIB, free_bytes=300.0 * MIB)


# --- round trip through the sim's formatter, every profile -------------------------------------------------
@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_sim_round_trip(name: str, tmp_path: Path) -> None:
    prof = get_profile(name)
    fmt = LogFormatter(prof, api_pid=1, core_pid=2)
    now = 1_750_000_000.0
    cfg = StartupInfo(max_model_len=16384, max_num_batched_tokens=4096, num_gpu_blocks=12345, kv_cache_tokens=197520,
                      non_default_args={"max_num_seqs": 48})
    lines = fmt.startup(now, cfg)
    lines += fmt.stats(now + 100, prompt_tps=1234.5, gen_tps=678.9, running=17, waiting=5, kv_usage=0.456,
                       prefix_hit_rate=0.25, preemptions_in_interval=2, swapped=1, cpu_kv_usage=0.03)
    lines += fmt.access(now + 101, "10.0.0.1:4242", "POST", "/v1/completions", 400)
    lines += fmt.cuda_oom_runtime(now + 200, tried_gib=1.5, total_gib=79.19, free_gib=0.25, in_use_gib=78.9,
                                  allocated_gib=70.0, reserved_unallocated_gib=3.5, private_pools_gib=1.25)
    lines += fmt.engine_death(now + 300, cause=None)
    lines += fmt.startup_oom(now + 400, 10.0, 79.19, 0.9, 71.27)
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n")
    s = scan_file(path, engine="hot", year=2025)
    assert s.error is None

    (stats,) = s.stats
    assert stats.timestamp == now + 100
    v = stats.values
    _sub(v, prompt_tps=1234.5, gen_tps=678.9, running=17.0, waiting=5.0, kv_usage=0.456, prefix_hit_rate=0.25)
    if not prof.v1:
        _sub(v, swapped=1.0, cpu_kv_usage=0.03)
    elif prof.stats_line == "v1_parts":
        _sub(v, preemptions=2.0)
    else:
        assert "preemptions" not in v

    c = _config(s)
    if prof.v1:
        assert c["kv_cache_tokens"] == 197520
        assert c["max_concurrency"] == pytest.approx(round(197520 / 16384, 2))
    else:
        assert c["num_gpu_blocks"] == 12345
    assert c["max_num_batched_tokens"] == 4096
    assert (c.get("non_default_args") or c["args"])["max_num_seqs"] == 48
    assert s.counts["http_400"] == 1

    (oom,) = _events(s, "cuda_oom")
    _sub(oom, tried_bytes=1.5 * GIB, total_bytes=79.19 * GIB, free_bytes=0.25 * GIB, in_use_bytes=78.9 * GIB,
         allocated_bytes=70.0 * GIB, private_pools_bytes=1.25 * GIB, reserved_unallocated_bytes=3.5 * GIB)
    deaths = _events(s, "engine_death")
    assert deaths, "engine death not recognised"
    assert all(e.timestamp >= now for e in s.events)
    (start,) = _events(s, "startup_oom")
    if prof.v1 and name != "0.8":
        _sub(start, reason="free_memory_at_startup", free_bytes=10.0 * GIB, total_bytes=79.19 * GIB,
             gpu_memory_utilization=0.9, requested_bytes=71.27 * GIB)
    else:
        assert start["reason"] == "no_kv_memory"


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_sim_faults_recognised(name: str) -> None:
    fmt = LogFormatter(get_profile(name), api_pid=1, core_pid=2)
    lines = fmt.nccl_timeout(0, seq=77, timeout_ms=120000, ran_ms=120500) + fmt.preemption_warning_v0(0, "r-1", 101)
    lines += fmt.sleep(0, 1, 40.0) + fmt.wake_up(0, seconds=0.5)
    events = [e for line in lines if (p := parse_line(line)) and (e := recognize(p, "hot"))]
    kinds = [e.kind for e in events]
    assert events[0].details["seq"] == 77 and events[0].details["ran_s"] == 120.5
    assert ("preemption" in kinds) == (not get_profile(name).v1)
    if name != "0.6":
        assert next(e.details for e in events if e.kind == "sleep")["freed_bytes"] == 40.0 * GIB
        assert next(e.details for e in events if e.kind == "wake_up")["seconds"] == 0.5
