"""Recognise what a parsed vLLM log line says happened (reference sections 2.3-2.8).

`recognize(parsed, engine)` returns a `collectors.types.Event` or None. Kinds: engine_death, cuda_oom,
startup_oom, prompt_too_long, nccl_error, preemption, startup_config, model_timeout, sleep, wake_up and,
on request, stats. Numbers go in `Event.details` in SI units (bytes, seconds, ratios) with the
printed unit kept in the key name where it is not SI (`..._tokens`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from collectors.logparse import ParsedLine, literal_dict, parse_stats
from collectors.types import Event

Details = dict[str, Any]
_UNITS = {"bytes": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
          "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}
_SIZE = r"(\d+(?:\.\d+)?) ?(bytes|[KMGT]i?B)"
SIGNAL_NAMES = {-9: "SIGKILL", -6: "SIGABRT", -11: "SIGSEGV", -15: "SIGTERM", -7: "SIGBUS", -4: "SIGILL"}
GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/generate", "/v1/embeddings",
                     "/pooling", "/v1/audio/transcriptions", "/v1/audio/translations", "/inference/v1/generate")


def size_bytes(number: str, unit: str) -> float:
    """`1.16`, `GiB` -> bytes (PyTorch prints binary units; old releases wrote GB/MB for GiB/MiB)."""
    return float(number) * _UNITS[unit.lower()]


def _int(text: str) -> int:
    return int(text.replace(",", ""))


# --- out of memory --------------------------------------------------------------------------------
def _sz(name: str) -> str:
    return rf"(?P<{name}>\d+(?:\.\d+)?) ?(?P<{name}_u>bytes|[KMGT]i?B)"


_OOM_NEW = re.compile(
    rf"Tried to allocate {_sz('tried')}\. GPU (?P<gpu>\d+) has a total capacity of {_sz('total')} of which "
    rf"{_sz('free')} is free\.(?: Process \d+ has \d+(?:\.\d+)? ?(?:bytes|[KMGT]i?B) memory in use\.)*"
    rf"(?: Including non-PyTorch memory, this process has {_sz('in_use')} memory in use\.)?"
    rf"(?: Of the allocated memory {_sz('allocated')} is allocated by PyTorch,"
    rf"(?: with {_sz('private_pools')} allocated in private pools \(e\.g\., CUDA Graphs\),)? and "
    rf"{_sz('reserved_unallocated')} is reserved by PyTorch but unallocated\.)?"
)
_OOM_OLD = re.compile(
    rf"Tried to allocate {_sz('tried')} \(GPU (?P<gpu>\d+); {_sz('total')} total capacity; {_sz('allocated')} "
    rf"already allocated; {_sz('free')} free; {_sz('reserved')} reserved in total by PyTorch\)"
)


def _runtime_oom(msg: str) -> Details:
    d: Details = {}
    m = _OOM_NEW.search(msg) or _OOM_OLD.search(msg)
    if m:
        groups = m.groupdict()
        d["gpu"] = int(groups["gpu"])
        for name, value in groups.items():
            if name == "gpu" or name.endswith("_u") or value is None:
                continue
            d[f"{name}_bytes"] = size_bytes(value, groups[f"{name}_u"])
        if "reserved_bytes" in d:
            d["reserved_unallocated_bytes"] = max(d["reserved_bytes"] - d["allocated_bytes"], 0.0)
    if "reserved_unallocated_bytes" in d:
        held = d["reserved_unallocated_bytes"] + d.get("allocated_bytes", 0.0)
        d["fragmentation_ratio"] = d["reserved_unallocated_bytes"] / held if held > 0 else 0.0
        d["fragmentation_hint"] = "expandable_segments" in msg or d["reserved_unallocated_bytes"] > 0
    return d


_FREE_AT_START = re.compile(
    r"Free memory on device (?:(\S+) )?\((\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) GiB\) on startup is less than desired "
    r"GPU memory utilization \((\d+(?:\.\d+)?), (\d+(?:\.\d+)?) GiB\)"
)
_KV_TOO_SMALL_V1 = re.compile(
    r"max seq len \((\d+)\), \((\d+(?:\.\d+)?) GiB KV cache is needed, which is larger than the available KV "
    r"cache memory \((\d+(?:\.\d+)?) GiB\)\.(?: Based on the available memory, the estimated maximum model length "
    r"is (\d+))?"
)
_KV_TOO_SMALL_V0 = re.compile(
    r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)"
)
_GIB = 1024**3


def _startup_oom(msg: str) -> Details | None:
    if m := _FREE_AT_START.search(msg):
        d: Details = {"reason": "free_memory_at_startup", "free_bytes": float(m.group(2)) * _GIB,
                      "total_bytes": float(m.group(3)) * _GIB, "gpu_memory_utilization": float(m.group(4)),
                      "requested_bytes": float(m.group(5)) * _GIB}
        if m.group(1):
            d["device"] = m.group(1)
        return d
    if "No available memory for the cache blocks" in msg:
        return {"reason": "no_kv_memory"}
    if m := _KV_TOO_SMALL_V1.search(msg):
        d = {"reason": "kv_too_small_for_max_len", "max_model_len": int(m.group(1)),
             "needed_bytes": float(m.group(2)) * _GIB, "available_bytes": float(m.group(3)) * _GIB}
        if m.group(4):
            d["estimated_max_model_len"] = int(m.group(4))
        return d
    if m := _KV_TOO_SMALL_V0.search(msg):
        return {"reason": "kv_too_small_for_max_len", "max_model_len": int(m.group(1)),
                "kv_capacity_tokens": int(m.group(2))}
    if "Failed to load model - not enough GPU memory" in msg:
        d = {"reason": "model_load"}
        d.update(_runtime_oom(msg))
        return d
    return None


# --- prompt too long -------------------------------------------------------------------------------
_CTX = [
    (re.compile(r"maximum context length is (\d+) tokens\. However, you requested (\d+) tokens \((\d+) in the "
                r"messages, (\d+) in the completion\)"),
     ("max_model_len", "requested_tokens", "prompt_tokens", "max_tokens"), "v06"),
    (re.compile(r"maximum context length is (\d+) tokens\. However, your request has (\d+) input tokens"),
     ("max_model_len", "prompt_tokens"), "input"),
    (re.compile(r"'max_tokens' or 'max_completion_tokens' is too large: (\d+)\. This model's maximum context "
                r"length is (\d+) tokens and your request has (\d+) input tokens"),
     ("max_tokens", "max_model_len", "prompt_tokens"), "max_tokens"),
    (re.compile(r"The decoder prompt \(length (\d+)\) is longer than the maximum model length of (\d+)"),
     ("prompt_tokens", "max_model_len"), "engine"),
    (re.compile(r"maximum context length is (\d+) tokens\. However, your prompt contains (\d+) input tokens"),
     ("max_model_len", "prompt_tokens"), "input"),
    (re.compile(r"maximum context length is (\d+) tokens\. However, your prompt contains (\d+) characters \(more "
                r"than (\d+) characters, which is the upper bound for (\d+) input tokens\)"),
     ("max_model_len", "prompt_chars", "max_chars", "chars_bound_tokens"), "chars"),
]


def _prompt_too_long(msg: str) -> Details | None:
    for rx, names, variant in _CTX:
        if m := rx.search(msg):
            d: Details = {"variant": variant}
            d.update({n: int(v) for n, v in zip(names, m.groups(), strict=True)})
            return d
    return None


# --- NCCL ------------------------------------------------------------------------------------------
_WATCHDOG = re.compile(
    r"(?:\[Rank (\d+)\] )?Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
    r"(?:.*?Timeout\(ms\)=(\d+))?\)(?: ran for (\d+) milliseconds)?"
)
_NCCL_ERR = re.compile(r"NCCL error:? (.+)")


def _nccl(msg: str) -> Details | None:
    if m := _WATCHDOG.search(msg):
        d: Details = {"signal": "watchdog_timeout", "seq": int(m.group(2)), "op": m.group(3)}
        if m.group(1):
            d["rank"] = int(m.group(1))
        if m.group(4):
            d["timeout_s"] = int(m.group(4)) / 1000.0
        if m.group(5):
            d["ran_s"] = int(m.group(5)) / 1000.0
        return d
    if m := _NCCL_ERR.search(msg):
        return {"signal": "nccl_error", "error": m.group(1).strip()[:300]}
    if "To avoid data inconsistency, we are taking the entire process down" in msg:
        return {"signal": "process_down"}
    if "Some NCCL operations have failed or timed out" in msg:
        return {"signal": "operations_failed"}
    return None


# --- engine death ----------------------------------------------------------------------------------
_WORKER_DIED = re.compile(r"Worker proc (\S+) died unexpectedly(?: \(exit code: (-?\d+)\))?")
_CORE_DIED = re.compile(r"Engine core proc (\S+) died unexpectedly")
_FAILED_PROCS = re.compile(r"Failed core proc\(s\): (\{.*\})")


def _death(msg: str) -> Details | None:
    if m := _WORKER_DIED.search(msg):
        d: Details = {"signal": "worker_died", "process": m.group(1)}
        if m.group(2) is not None:
            code = int(m.group(2))
            d["exit_code"] = code
            if code in SIGNAL_NAMES:
                d["exit_signal"] = SIGNAL_NAMES[code]
        return d
    if m := _CORE_DIED.search(msg):
        return {"signal": "core_died", "process": m.group(1)}
    if "EngineCore encountered a fatal error" in msg:
        return {"signal": "core_fatal_error"}
    if "engine core exited unexpectedly" in msg:
        return {"signal": "core_exited"}
    if "AsyncEngineDeadError" in msg:
        return {"signal": "async_engine_dead", "engine": "V0"}
    if "EngineDeadError" in msg:
        return {"signal": "engine_dead_error"}
    if "Engine loop has died" in msg:
        return {"signal": "engine_loop_died", "engine": "V0"}
    if "MQLLMEngine is already dead" in msg:
        return {"signal": "mq_engine_dead", "engine": "V0"}
    if "Engine core initialization failed" in msg or "EngineCore failed to start" in msg:
        d = {"signal": "startup_failed", "phase": "startup"}
        if m := _FAILED_PROCS.search(msg):
            d["failed_procs"] = literal_dict(m.group(1))
        return d
    if "Got fatal signal from worker processes" in msg:
        return {"signal": "worker_fatal_signal"}
    return None


# --- start-up configuration ------------------------------------------------------------------------
_CONFIG_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Details]]] = [
    (re.compile(r"# (\w+) blocks: (\d+), # CPU blocks: (\d+)"),
     lambda m: {"num_gpu_blocks": int(m.group(2)), "num_cpu_blocks": int(m.group(3)), "device": m.group(1)}),
    (re.compile(r"(\w+) KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for ([\d,]+) tokens per request: "
                r"(\d+(?:\.\d+)?)x)?"),
     lambda m: {"kv_cache_tokens": _int(m.group(2)), "device": m.group(1),
                **({"max_concurrency_tokens": _int(m.group(3)), "max_concurrency": float(m.group(4))}
                   if m.group(3) else {})}),
    (re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: (\d+(?:\.\d+)?)x"),
     lambda m: {"max_concurrency_tokens": _int(m.group(1)), "max_concurrency": float(m.group(2))}),
    (re.compile(r"non-default args: (\{.*\})"), lambda m: {"non_default_args": literal_dict(m.group(1))}),
    (re.compile(r"^args: Namespace\((.*)\)\s*$"),
     lambda m: {"args": literal_dict(m.group(1), "=")}),
    (re.compile(r"Using max model len (\d+)"), lambda m: {"max_model_len": int(m.group(1))}),
    (re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
     lambda m: {"max_num_batched_tokens": int(m.group(1))}),
    (re.compile(r"vLLM server version (\S+), serving model (\S+)"),
     lambda m: {"version": m.group(1), "model": m.group(2)}),
    (re.compile(r"vLLM API server version (\S+)"), lambda m: {"version": m.group(1)}),
    (re.compile(r"Initializing an? (?:(V[01]) )?LLM engine \(v([^)]+)\) with config: (.*)"),
     lambda m: {"engine_generation": m.group(1) or "V0", "version": m.group(2),
                "engine_config": literal_dict(m.group(3), "=")}),
    (re.compile(r"Available KV cache memory: (\d+(?:\.\d+)?) GiB"),
     lambda m: {"kv_cache_memory_bytes": float(m.group(1)) * _GIB}),
    (re.compile(r"reserved for KV Cache is (\d+(?:\.\d+)?) ?GiB"),
     lambda m: {"kv_cache_memory_bytes": float(m.group(1)) * _GIB}),
    (re.compile(r"Model loading took (\d+(?:\.\d+)?) GiB(?: memory)? and (\d+(?:\.\d+)?) seconds"),
     lambda m: {"weights_bytes": float(m.group(1)) * _GIB, "model_load_s": float(m.group(2))}),
    (re.compile(r"Loading model weights took (\d+(?:\.\d+)?) GB"),
     lambda m: {"weights_bytes": float(m.group(1)) * _GIB}),
    (re.compile(r"cache_config_info with initialization after num_gpu_blocks is: (\d+)"),
     lambda m: {"num_gpu_blocks": int(m.group(1))}),
    (re.compile(r"init engine \(profile, create kv cache, warmup model\) took (\d+(?:\.\d+)?) s(?:econds)?"
                r"(?: \(compilation: (\d+(?:\.\d+)?) s\))?"),
     lambda m: {"init_s": float(m.group(1)), **({"compile_s": float(m.group(2))} if m.group(2) else {})}),
    (re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)"), lambda m: {"listen": m.group(1)}),
    (re.compile(r"^Route: (\S+), Methods: (.+)$"), lambda m: {"route": m.group(1), "methods": m.group(2)}),
    (re.compile(r"Development endpoints are enabled"), lambda m: {"dev_mode": True}),
]

# --- dispatch --------------------------------------------------------------------------------------
_TRIGGER = re.compile(
    r"(?P<oom>out of memory|not enough GPU memory|No available memory for the cache|Free memory on device|"
    r"max seq len \()"
    r"|(?P<ctx>maximum context length|decoder prompt \(length)"
    r"|(?P<nccl>NCCL|Watchdog caught collective)"
    r"|(?P<death>died unexpectedly|EngineCore encountered a fatal|EngineDeadError|exited unexpectedly|"
    r"Engine loop has died|already dead|Engine core initialization failed|EngineCore failed to start|"
    r"Got fatal signal from worker)"
    r"|(?P<pre>is preempted by PreemptionMode)"
    r"|(?P<timeout>RPC call to \w+ timed out)"
    r"|(?P<sleep>Sleep mode freed|seconds to fall asleep)"
    r"|(?P<wake>seconds to wake up)"
    r"|(?P<cfg>blocks: |KV cache size:|Maximum concurrency|non-default args|^args: Namespace|Using max model len|"
    r"Chunked prefill is enabled|server version|LLM engine \(v|Available KV cache memory|reserved for KV Cache|"
    r"Model loading took|Loading model weights took|cache_config_info|init engine \(profile|"
    r"Starting vLLM|^Route: |Development endpoints are enabled)"
)
# Every _TRIGGER alternative contains one of these words; `in` checks are much cheaper than the regex.
_PREFILTER = (
    "memory", "seq len", "context", "decoder", "NCCL", "Watchdog", "died", "unexpectedly", "fatal", "dead", "Dead",
    "initialization failed", "failed to start", "preempted", "timed out", "Sleep mode", "asleep", "wake up",
    "blocks: ", "KV cache size", "concurrency", "args", "max model len", "Chunked", "version", "LLM engine",
    "Model loading", "Loading model", "cache_config_info", "init engine", "Starting vLLM", "Route: ", "Development",
)


def _may_trigger(msg: str) -> bool:
    for word in _PREFILTER:  # noqa: SIM110 - a plain loop is faster than any() here
        if word in msg:
            return True
    return False


_PREEMPT = re.compile(r"(?:Sequence group (\S+) )?is preempted by PreemptionMode\.(\w+) mode.*?"
                      r"total_num_cumulative_preemption=(\d+)")
_SLEEP = re.compile(r"Sleep mode freed (\d+(?:\.\d+)?) GiB memory, (\d+(?:\.\d+)?) GiB memory is still in use")
_ASLEEP = re.compile(r"It took (\d+(?:\.\d+)?) seconds to fall asleep")
_WAKE = re.compile(r"It took (\d+(?:\.\d+)?) seconds to wake up(?: tags (.*?))?\.?$")


def _classify(group: str, msg: str) -> tuple[str, Details] | None:
    if group == "oom":
        startup = _startup_oom(msg)
        if startup is not None:
            return "startup_oom", startup
        if "out of memory" in msg.lower():
            return "cuda_oom", _runtime_oom(msg)
        return None
    if group == "ctx":
        d = _prompt_too_long(msg)
        return ("prompt_too_long", d) if d is not None else None
    if group == "nccl":
        d = _nccl(msg)
        return ("nccl_error", d) if d is not None else None
    if group == "death":
        d = _death(msg)
        return ("engine_death", d) if d is not None else None
    if group == "pre":
        if m := _PREEMPT.search(msg):
            d = {"mode": m.group(2), "total_preemptions": int(m.group(3))}
            if m.group(1):
                d["request_id"] = m.group(1)
            return "preemption", d
        return None
    if group == "timeout":
        return "model_timeout", {"rpc": msg.split("RPC call to ", 1)[1].split(" ", 1)[0]}
    if group == "sleep":
        if m := _SLEEP.search(msg):
            return "sleep", {"freed_bytes": float(m.group(1)) * _GIB, "still_in_use_bytes": float(m.group(2)) * _GIB}
        if m := _ASLEEP.search(msg):
            return "sleep", {"seconds": float(m.group(1))}
        return None
    if group == "wake":
        if m := _WAKE.search(msg):
            d = {"seconds": float(m.group(1))}
            if m.group(2):
                d["tags"] = m.group(2)
            return "wake_up", d
        return None
    details: Details = {}
    for rx, build in _CONFIG_RULES:
        if m := rx.search(msg):
            details.update(build(m))
            if rx.pattern.startswith(("non-default", "^args", "Initializing")):
                break
    return ("startup_config", details) if details else None


def recognize(
    parsed: ParsedLine, engine: str, *, fallback_ts: float = 0.0, include_stats: bool = False
) -> Event | None:
    """The event a log line reports, or None. `fallback_ts` stamps lines that carry no time."""
    msg = parsed.message
    ts = parsed.timestamp if parsed.timestamp is not None else fallback_ts
    if parsed.kind == "access" or msg.startswith("  "):
        return None  # access lines are counted elsewhere; indented text is traceback source code
    if include_stats:
        stats = parse_stats(msg)
        if stats is not None:
            return Event("stats", engine, ts, msg[:500], stats)
    if not _may_trigger(msg):
        return None
    hit = _TRIGGER.search(msg)
    if hit is None or hit.lastgroup is None:
        return None
    try:
        found = _classify(hit.lastgroup, msg)
        if found is None and hit.lastgroup != "oom" and "out of memory" in msg.lower():
            found = _classify("oom", msg)
    except (ValueError, KeyError, IndexError, OverflowError):
        return None
    if found is None:
        return None
    kind, details = found
    if parsed.process is not None:
        details["logged_by"] = parsed.process
    if parsed.pid is not None:
        details["logged_by_pid"] = parsed.pid
    return Event(kind, engine, ts, msg[:2000], details)


def is_generation_route(path: str | None) -> bool:
    """Whether an access line's path is an inference route (where a 400 may be a too-long prompt)."""
    if not path:
        return False
    base = path.split("?", 1)[0]
    return base.startswith(GENERATION_ROUTES)
