"""sim.logfmt: lines must match regexes written from vLLM's own format strings and give back the numbers."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from sim.logfmt import LogFormatter, StartupInfo, is_zero_interval, should_log_stats, torch_format_size
from sim.profiles import PROFILE_NAMES, PROFILES, VersionProfile

NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
API_PID, CORE_PID = 4021, 4100

# --- regexes from vLLM's format strings ------------------------------------------------------------
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TS = r"(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
LEVEL = r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)"
# vllm/logger.py _FORMAT: "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s" (0.6) ...
PREFIX_V06 = re.compile(rf"^{LEVEL} {TS} (?P<file>[\w.]+\.py):(?P<line>\d+)\] (?P<msg>.*)$")
# ... "[%(filename)s:%(lineno)d]" from 0.8
PREFIX_V08 = re.compile(rf"^{LEVEL} {TS} \[(?P<file>[\w.]+\.py):(?P<line>\d+)\] (?P<msg>.*)$")
# 0.10-0.25: ESC[1;36m(ProcName pid=N)ESC[0;0m + v08 layout; 0.26+: same text without colour
PROC_ANSI = re.compile(r"^\x1b\[1;36m\((?P<proc>[\w ]+) pid=(?P<pid>\d+)\)\x1b\[0;0m (?P<rest>.*)$")
PROC_PLAIN = re.compile(r"^\((?P<proc>[\w ]+) pid=(?P<pid>\d+)\) (?P<rest>.*)$")
UVICORN = re.compile(r"^INFO:     (?P<msg>.*)$")
ACCESS = re.compile(
    r'^INFO:     (?P<client>[\d.]+:\d+) - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.1" '
    r"(?P<status>\d{3}) (?P<phrase>.+)$"
)
NUM = r"(\d+(?:\.\d+)?)"
# V0 metrics.py
STATS_V0 = re.compile(
    rf"^Avg prompt throughput: {NUM} tokens/s, Avg generation throughput: {NUM} tokens/s, "
    r"Running: (\d+) reqs, Swapped: (\d+) reqs, Pending: (\d+) reqs, "
    rf"GPU KV cache usage: {NUM}%, CPU KV cache usage: {NUM}%\.$"
)
PREFIX_V0 = re.compile(rf"^Prefix cache hit rate: GPU: {NUM}%, CPU: {NUM}%$")
# V1 loggers.py 0.8-0.11
STATS_V1_FIXED = re.compile(
    rf"^Engine (\d{{3}}): Avg prompt throughput: {NUM} tokens/s, Avg generation throughput: {NUM} tokens/s, "
    rf"Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: {NUM}%, Prefix cache hit rate: {NUM}%$"
)
# V1 0.12+: "Engine %03d: " + optional "key: value" parts joined by ", "
STATS_V1_PARTS_HEAD = re.compile(r"^Engine (\d{3}): (.*)$")
PART = re.compile(
    r"(Avg prompt throughput|Avg generation throughput|Running|Waiting|Deferred|Preemptions|"
    r"\w+ KV cache usage|Prefix cache hit rate): " + NUM
)
VERSION_OLD = re.compile(r"^vLLM API server version (\S+)$")
VERSION_NEW = re.compile(r"^vLLM server version (\S+), serving model (\S+)$")
KV_SIZE = re.compile(r"^(\w+) KV cache size: ([\d,]+) tokens$")
KV_CONC = re.compile(r"^Maximum concurrency for ([\d,]+) tokens per request: (\d+\.\d{2})x$")
KV_ONE = re.compile(
    r"^(\w+) KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
    r"request: (\d+\.\d{2})x$"
)
V0_BLOCKS = re.compile(r"^# (\w+) blocks: (\d+), # CPU blocks: (\d+)$")
LISTEN = re.compile(r"^Starting vLLM (?:API server(?: (?P<idx>\d+))?|server) on (?P<url>http://\S+)$")
ROUTE = re.compile(r"^Route: (?P<path>\S+), Methods: (?P<methods>.+)$")


def fmt(name: str) -> LogFormatter:
    return LogFormatter(PROFILES[name], api_pid=API_PID, core_pid=CORE_PID)


def parse(profile: VersionProfile, line: str) -> dict[str, str | None]:
    """Split a line into proc/pid and (for logger records) level/ts/file/msg; asserts the layout."""
    proc = pid = None
    rest = line
    if profile.log_prefix == "v010" and (profile.v1 or line.startswith("\x1b")):
        # 0.10 running V0: the engine (MQLLMEngine) process prints without a process prefix
        m = PROC_ANSI.match(line)
        assert m, line
        proc, pid, rest = m["proc"], m["pid"], m["rest"]
    elif profile.log_prefix == "v026":
        assert "\x1b" not in line
        m = PROC_PLAIN.match(line)
        assert m, line
        proc, pid, rest = m["proc"], m["pid"], m["rest"]
    else:
        assert "\x1b" not in line
        assert not line.startswith("("), line
        if profile.log_prefix == "v010":
            assert rest.startswith(("INFO", "WARNING", "ERROR")), line  # V0 engine lines on 0.10
    u = UVICORN.match(rest)
    if u:
        return {"proc": proc, "pid": pid, "uvicorn": u["msg"], "msg": None}
    pattern = PREFIX_V06 if profile.log_prefix == "v06" else PREFIX_V08
    m = pattern.match(rest)
    if not m:  # raw stderr text (tracebacks, C++): only allowed with a process prefix or as plain text
        return {"proc": proc, "pid": pid, "uvicorn": None, "msg": None, "raw": rest}
    return {
        "proc": proc,
        "pid": pid,
        "uvicorn": None,
        "msg": m["msg"],
        "level": m["level"],
        "ts": m["ts"],
        "file": m["file"],
    }


def messages(profile: VersionProfile, lines: list[str]) -> list[str]:
    return [m for m in (parse(profile, line)["msg"] for line in lines) if m is not None]


STATS_CASES: list[dict[str, Any]] = [
    dict(
        prompt_tps=1523.44,
        gen_tps=812.66,
        running=42,
        waiting=7,
        kv_usage=0.8734,
        prefix_hit_rate=0.439,
        preemptions_in_interval=0,
        swapped=0,
        cpu_kv_usage=0.0,
        deferred=0,
    ),
    dict(
        prompt_tps=6120.3,
        gen_tps=1402.8,
        running=128,
        waiting=61,
        kv_usage=0.987,
        prefix_hit_rate=None,
        preemptions_in_interval=9,
        swapped=3,
        cpu_kv_usage=0.125,
        deferred=4,
    ),
    dict(
        prompt_tps=0.0,
        gen_tps=0.0,
        running=0,
        waiting=0,
        kv_usage=0.0,
        prefix_hit_rate=0.0,
        preemptions_in_interval=0,
        swapped=0,
        cpu_kv_usage=0.0,
        deferred=0,
    ),
]


# --- prefix -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_every_startup_line_has_the_release_prefix(name: str) -> None:
    p = PROFILES[name]
    lines = fmt(name).startup(NOW, StartupInfo(dev_mode=True))
    assert lines and all("\n" not in line for line in lines)
    has_ansi = any("\x1b" in line for line in lines)
    assert has_ansi == (p.log_prefix == "v010")
    procs = set()
    for line in lines:
        parsed = parse(p, line)
        assert parsed["msg"] is not None or parsed["uvicorn"] is not None, line
        procs.add((parsed["proc"], parsed["pid"]))
    if p.log_prefix in ("v010", "v026"):
        assert ("APIServer", str(API_PID)) in procs
        if p.v1:
            core = {"0.10": "EngineCore_0"}.get(
                name, "EngineCore" if p.log_prefix == "v026" else "EngineCore_DP0"
            )
            assert procs == {("APIServer", str(API_PID)), (core, str(CORE_PID))}
        else:
            assert procs == {("APIServer", str(API_PID)), (None, None)}
    else:
        assert procs == {(None, None)}


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_timestamps_are_utc_and_deterministic(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    f = fmt(name)
    cfg = StartupInfo()
    first = f.startup(NOW, cfg) + f.stats(NOW, **STATS_CASES[0])

    def no_clock() -> float:
        raise AssertionError("the formatter must not read the clock")

    monkeypatch.setattr(time, "time", no_clock)
    second = fmt(name).startup(NOW, cfg) + fmt(name).stats(NOW, **STATS_CASES[0])
    assert first == second
    ts = parse(PROFILES[name], first[0])["ts"]
    assert ts == "11-14 22:13:20"
    assert LogFormatter.timestamp(0.0) == "01-01 00:00:00"


# --- stats line -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", PROFILE_NAMES)
@pytest.mark.parametrize("case", range(len(STATS_CASES)))
def test_stats_line_round_trips(name: str, case: int) -> None:
    p = PROFILES[name]
    c = STATS_CASES[case]
    lines = fmt(name).stats(NOW, **c)
    msgs = messages(p, lines)
    assert len(msgs) == len(lines)
    if p.log_prefix in ("v010", "v026"):
        assert parse(p, lines[0])["proc"] == ("APIServer" if p.v1 else None)
    if p.stats_line == "v0":
        m = STATS_V0.match(msgs[0])
        assert m, msgs[0]
        assert float(m[1]) == float(f"{c['prompt_tps']:.1f}") and float(m[2]) == float(f"{c['gen_tps']:.1f}")
        assert (int(m[3]), int(m[4]), int(m[5])) == (c["running"], c["swapped"], c["waiting"])
        assert m[6] == f"{c['kv_usage'] * 100:.1f}" and m[7] == f"{c['cpu_kv_usage'] * 100:.1f}"
        assert "Waiting:" not in msgs[0]
        if c["prefix_hit_rate"] is None:
            assert len(msgs) == 1
        else:
            pm = PREFIX_V0.match(msgs[1])
            assert pm and pm[1] == f"{c['prefix_hit_rate'] * 100:.2f}"
        return
    assert "Pending:" not in msgs[0] and "Swapped:" not in msgs[0]
    assert len(msgs) == 1
    if p.stats_line == "v1_fixed":
        m = STATS_V1_FIXED.match(msgs[0])
        assert m, msgs[0]
        assert m[1] == "000"
        assert (m[2], m[3]) == (f"{c['prompt_tps']:.1f}", f"{c['gen_tps']:.1f}")
        assert (int(m[4]), int(m[5])) == (c["running"], c["waiting"])
        assert m[6] == f"{c['kv_usage'] * 100:.1f}"
        assert m[7] == f"{(c['prefix_hit_rate'] or 0.0) * 100:.1f}"
        assert "Preemptions" not in msgs[0]
        return
    head = STATS_V1_PARTS_HEAD.match(msgs[0])
    assert head and head[1] == "000"
    chunks = head[2].split(", ")
    got = {}
    for chunk in chunks:
        m = PART.fullmatch(chunk.replace(" tokens/s", "").replace(" reqs", "").rstrip("%"))
        assert m, chunk
        got[m[1]] = m[2]
    assert got["Avg prompt throughput"] == f"{c['prompt_tps']:.1f}"
    assert got["Avg generation throughput"] == f"{c['gen_tps']:.1f}"
    assert int(got["Running"]) == c["running"] and int(got["Waiting"]) == c["waiting"]
    assert got["GPU KV cache usage"] == f"{c['kv_usage'] * 100:.1f}"
    assert ("Preemptions" in got) == (c["preemptions_in_interval"] > 0)
    if "Preemptions" in got:
        assert int(got["Preemptions"]) == c["preemptions_in_interval"]
    assert ("Deferred" in got) == (p.waiting_by_reason and c["deferred"] > 0)
    if c["prefix_hit_rate"] is None and p.prefix_hit_only_with_queries:
        assert "Prefix cache hit rate" not in got
    else:
        assert got["Prefix cache hit rate"] == f"{(c['prefix_hit_rate'] or 0.0) * 100:.1f}"


def test_stats_device_word_on_one_line_releases() -> None:
    line = fmt("0.33").stats(NOW, **{**STATS_CASES[0], "device": "XPU"})
    assert "XPU KV cache usage: 87.3%" in line[0]
    line = fmt("0.12").stats(NOW, **{**STATS_CASES[0], "device": "XPU"})
    assert "GPU KV cache usage" in line[0]


def test_idle_suppression() -> None:
    assert is_zero_interval(0.0, 0.0) and not is_zero_interval(0.1, 0.0) and not is_zero_interval(0.0, 3.0)
    assert should_log_stats(prev_zero=False, this_zero=False)
    assert should_log_stats(prev_zero=True, this_zero=False)
    assert should_log_stats(prev_zero=False, this_zero=True)  # the first idle interval still shows
    assert not should_log_stats(prev_zero=True, this_zero=True)


# --- access line ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", PROFILE_NAMES)
@pytest.mark.parametrize(
    ("status", "phrase"),
    [(200, "OK"), (400, "Bad Request"), (500, "Internal Server Error"), (503, "Service Unavailable")],
)
def test_access_line(name: str, status: int, phrase: str) -> None:
    p = PROFILES[name]
    (line,) = fmt(name).access(NOW, "127.0.0.1:51234", "POST", "/v1/completions", status)
    stripped = ANSI.sub("", line)
    if p.log_prefix in ("v010", "v026"):
        assert stripped.startswith(f"(APIServer pid={API_PID}) ")
        stripped = stripped.split(") ", 1)[1]
    m = ACCESS.match(stripped)
    assert m, line
    assert (m["client"], m["method"], m["path"], int(m["status"]), m["phrase"]) == (
        "127.0.0.1:51234",
        "POST",
        "/v1/completions",
        status,
        phrase,
    )


# --- startup lines ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_startup_lines_carry_the_config(name: str) -> None:
    p = PROFILES[name]
    cfg = StartupInfo(
        port=8123,
        max_model_len=8192,
        kv_cache_tokens=428544,
        num_gpu_blocks=26784,
        max_num_batched_tokens=4096,
        kv_cache_gib=52.31,
        dev_mode=True,
        non_default_args={"max_num_seqs": 64, "gpu_memory_utilization": 0.85},
        routes=[("/health", "GET"), ("/sleep", "POST")],
    )
    lines = fmt(name).startup(NOW, cfg)
    msgs = messages(p, lines)
    uv = [parse(p, line)["uvicorn"] for line in lines if parse(p, line)["uvicorn"]]
    assert uv == [
        f"Started server process [{API_PID}]",
        "Waiting for application startup.",
        "Application startup complete.",
    ]
    assert uv == [UVICORN.match(ANSI.sub("", x).split(") ", 1)[-1])["msg"] for x in lines[-3:]]  # type: ignore[index]

    vm = VERSION_NEW.match(msgs[0]) if p.version_line == "server_version" else VERSION_OLD.match(msgs[0])
    assert vm and vm[1] == p.version
    if p.version_line == "server_version":
        assert vm[2] == cfg.model
    if name in ("0.6", "0.8"):
        assert msgs[1].startswith("args: Namespace(") and "max_num_seqs=64" in msgs[1]
    else:
        assert msgs[1].startswith("non-default args: {") and "'max_num_seqs': 64" in msgs[1]
        assert f"Using max model len {cfg.max_model_len}" in msgs
        assert f"Resolved architecture: {cfg.architecture}" in msgs
    assert "Chunked prefill is enabled with max_num_batched_tokens=4096." in msgs
    engine = next(m for m in msgs if "LLM engine (v" in m)
    assert f"(v{p.version}) with config: model='{cfg.model}'" in engine
    assert ("V1 LLM engine" in engine) == p.v1

    if p.kv_size_line == "v0_blocks":
        bm = next(V0_BLOCKS.match(m) for m in msgs if V0_BLOCKS.match(m))
        assert bm and int(bm[2]) == 26784 and int(bm[3]) == cfg.num_cpu_blocks
    elif p.kv_size_line == "v1_two_lines":
        size = [KV_SIZE.match(m) for m in msgs if KV_SIZE.match(m)]
        conc = [KV_CONC.match(m) for m in msgs if KV_CONC.match(m)]
        assert len(size) == 1 and len(conc) == 1
        assert size[0] and int(size[0][2].replace(",", "")) == 428544
        assert conc[0] and conc[0][1] == "8,192" and conc[0][2] == f"{428544 / 8192:.2f}"
    else:
        one = [KV_ONE.match(m) for m in msgs if KV_ONE.match(m)]
        assert len(one) == 1 and one[0]
        assert one[0][2] == "428,544" and one[0][3] == "8,192" and one[0][4] == "52.31"
        assert not any(KV_CONC.match(m) for m in msgs)
    if p.v1 and name != "0.8":
        assert "Available KV cache memory: 52.31 GiB" in msgs

    lm = next(LISTEN.match(m) for m in msgs if LISTEN.match(m))
    assert lm and lm["url"] == "http://0.0.0.0:8123"
    assert (lm["idx"] is not None) == (p.listen_line == "v015")
    assert ("vLLM server on" in lm[0]) == (p.listen_line == "v020")
    i = msgs.index("Available routes are:")
    routes = [ROUTE.match(m) for m in msgs[i + 1 :]]
    assert [(r["path"], r["methods"]) for r in routes if r] == cfg.routes
    assert any(m.startswith("SECURITY WARNING: Development endpoints are enabled!") for m in msgs)
    assert not any("SECURITY WARNING" in m for m in messages(p, fmt(name).startup(NOW, StartupInfo())))
    assert parse(p, lines[-4])["ts"] == LogFormatter.timestamp(NOW + LogFormatter.startup_duration(cfg))


# --- faults -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_engine_death(name: str) -> None:
    p = PROFILES[name]
    f = fmt(name)
    for cause in ("RuntimeError: CUDA error: an illegal memory access was encountered", None):
        lines = f.engine_death(NOW, cause=cause)
        text = "\n".join(ANSI.sub("", line) for line in lines)
        assert "HTTP/1.1" not in text  # nothing in flight: no access line is made up
        flight = [("127.0.0.1:5000", "POST", "/v1/completions"), ("127.0.0.1:5001", "POST", "/v1/chat/completions")]
        with_flight = "\n".join(ANSI.sub("", line) for line in f.engine_death(NOW, cause=cause, in_flight=flight))
        assert with_flight.count("HTTP/1.1\" 500 Internal Server Error") == 2
        assert text.endswith("INFO:     Shutting down")
        if p.v1:
            assert "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue." in text
            assert ("EngineCore encountered a fatal error." in text) == (cause is not None)
            died = "died unexpectedly, shutting down client." in text
            exited = "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup" in text
            if cause is None:
                assert died == (name in ("0.8", "0.10", "0.11", "0.12"))
                assert exited == (p.log_prefix == "v026")
            else:
                assert not died and not exited
        else:
            assert "RuntimeError: Engine loop has died" in text
            assert "MQLLMEngine is already dead, terminating server process" in text
        for line in lines:
            parse(p, line)


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_cuda_oom_runtime(name: str) -> None:
    lines = fmt(name).cuda_oom_runtime(
        NOW,
        tried_gib=1.16,
        total_gib=79.19,
        free_gib=612 / 1024,
        in_use_gib=78.57,
        allocated_gib=74.10,
        reserved_unallocated_gib=2.31,
        private_pools_gib=1.02,
    )
    oom = next(ANSI.sub("", x) for x in lines if "torch.OutOfMemoryError" in x)
    m = re.search(
        r"Tried to allocate ([\d.]+) GiB\. GPU 0 has a total capacity of ([\d.]+) GiB of which "
        r"([\d.]+) MiB is free\. .* Of the allocated memory ([\d.]+) GiB is allocated by PyTorch, with "
        r"([\d.]+) GiB allocated in private pools \(e\.g\., CUDA Graphs\), and ([\d.]+) GiB is reserved "
        r"by PyTorch but unallocated\. If reserved but unallocated memory is large try setting "
        r"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation\.$",
        oom,
    )
    assert m and m.groups() == ("1.16", "79.19", "612.00", "74.10", "1.02", "2.31")
    assert torch_format_size(512) == "512 bytes" and torch_format_size(3 * 1024**2) == "3.00 MiB"


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_startup_oom(name: str) -> None:
    p = PROFILES[name]
    text = "\n".join(ANSI.sub("", x) for x in fmt(name).startup_oom(NOW, 61.05, 119.7, 0.52, 62.24))
    if p.v1 and name != "0.8":
        dev = "cuda:0 " if p.log_prefix == "v026" else ""
        assert (
            f"ValueError: Free memory on device {dev}(61.05/119.7 GiB) on startup is less than desired GPU "
            "memory utilization (0.52, 62.24 GiB). Decrease GPU memory utilization or reduce GPU memory "
            "used by other processes."
        ) in text
        assert "RuntimeError: Engine core initialization failed. See root cause above." in text
    else:
        assert "ValueError: No available memory for the cache blocks." in text


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_other_fault_lines(name: str) -> None:
    p = PROFILES[name]
    f = fmt(name)
    nccl = [ANSI.sub("", x) for x in f.nccl_timeout(NOW, timeout_ms=600000, ran_ms=600027)]
    assert "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=158046, OpType=ALLREDUCE" in nccl[0]
    assert "Timeout(ms)=600000) ran for 600027 milliseconds before timing out." in nccl[0]
    assert nccl[1].endswith("To avoid data inconsistency, we are taking the entire process down.")
    kv = "\n".join(f.kv_cache_too_small(NOW, 131072, 16.0, 9.87, 80768))
    assert "max seq len (131072)" in kv
    for total in (1, 2, 50, 51, 101):
        pre = f.preemption_warning_v0(NOW, "chat-55b8bdce", total)
        if p.v1 or total % 50 != 1:
            assert pre == []
        else:
            msg = messages(p, pre)[0]
            assert parse(p, pre[0])["level"] == "WARNING"
            assert msg.startswith(
                "Sequence group chat-55b8bdce is preempted by PreemptionMode.RECOMPUTE mode"
            )
            assert msg.endswith(f"total_num_cumulative_preemption={total}")
    sleep = messages(p, f.sleep(NOW, 1, 60.5, still_in_use_gib=1.25, seconds=2.5))
    wake = messages(p, f.wake_up(NOW, seconds=1.2))
    if name == "0.6":
        assert sleep == [] and wake == []
    else:
        assert sleep == [
            "Sleep mode freed 60.50 GiB memory, 1.25 GiB memory is still in use.",
            "It took 2.500000 seconds to fall asleep.",
        ]
        assert wake == ["It took 1.200000 seconds to wake up tags {'weights', 'kv_cache'}."]
    err = f.request_error(
        NOW, "The decoder prompt (length 9120) is longer than the maximum model length of 8192."
    )
    if name in ("0.6", "0.8"):
        assert err == []
    else:
        assert ANSI.sub("", err[-1]).endswith(
            "ValueError: The decoder prompt (length 9120) is longer than the maximum model length of 8192."
        )


def test_access_line_for_an_unknown_status_has_no_phrase() -> None:
    from sim.logfmt import LogFormatter
    from sim.profiles import get_profile

    line = LogFormatter(get_profile("0.33"), api_pid=1, core_pid=2).access(0.0, "127.0.0.1:1", "POST", "/v1/x", 499)
    assert line[-1].endswith('"POST /v1/x HTTP/1.1" 499 ')
