"""Parse one vLLM log line of any release, and the periodic stats line of any format.

Pure functions, no I/O. Layouts handled (reference section 2.1):

* 0.6 ``LEVEL MM-DD HH:MM:SS file.py:LINE] msg``; 0.8+ ``LEVEL MM-DD HH:MM:SS [file.py:LINE] msg``
  (0.26+ DEBUG: a short relative path such as ``[v1/metrics/loggers.py:283]``);
* a process prefix ``(APIServer pid=N) `` / ``(EngineCore_DP0 pid=N) ``, ANSI-coloured or not, and any
  ``VLLM_LOGGING_PREFIX`` text before the level;
* uvicorn lines ``INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK`` (kind ``access``);
* python-json-logger lines (asctime, levelname, name, processName, process, message; kind ``json``);
* anything else (tracebacks, C++ stderr such as NCCL's watchdog) as kind ``raw``, prefix stripped.
"""

from __future__ import annotations

import ast
import calendar
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, Literal

LineKind = Literal["vllm", "access", "json", "raw"]

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_PROC = re.compile(r"\((?P<proc>[^()]{1,80}?) pid=(?P<pid>\d+)(?:,[^()]{0,80})?\)\s?")
_LEVEL_TS_FILE = (
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?) "
    r"\[?(?P<file>[^\s\[\]]+?):(?P<lineno>\d+)\] ?"
)
_HEADER = re.compile(_LEVEL_TS_FILE)
_PROC_OPT = r"(?:\((?P<proc>[^()]{1,80}?) pid=(?P<pid>\d+)(?:,[^()]{0,80})?\) ?)?"
# Fast paths for the common shapes (optional process prefix, then the vLLM header / a uvicorn access line).
_FAST_VLLM = re.compile(_PROC_OPT + _LEVEL_TS_FILE)
_FAST_ACCESS = re.compile(
    _PROC_OPT + r"(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+(?P<msg>(?P<client>\S+) - "
    r'"(?P<method>[A-Z]+) (?P<path>.*?) HTTP/[\d.]+" (?P<status>\d{3})(?: .*)?)$',
    re.S,
)
_UVICORN = re.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL|TRACE):\s+(?P<msg>.*)", re.S)
_ACCESS = re.compile(
    r'(?P<client>\S+) - "(?P<method>[A-Z]+) (?P<path>.*?) HTTP/[\d.]+" (?P<status>\d{3})(?: (?P<phrase>.*))?$'
)
_MAX_PREFIX = 256  # longest VLLM_LOGGING_PREFIX (+ process prefix) accepted before the header


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """One log line split into its parts. `message` is the text after every prefix."""

    kind: LineKind
    message: str
    level: str | None = None
    timestamp: float | None = None  # unix seconds; None without a timestamp or a reference year
    ts_text: str | None = None  # "MM-DD HH:MM:SS" as printed (to re-resolve the year)
    process: str | None = None  # APIServer, EngineCore_DP0, ... (JSON: processName)
    pid: int | None = None
    source: str | None = None  # file as printed: metrics.py, loggers.py, v1/metrics/loggers.py
    lineno: int | None = None
    prefix: str | None = None  # VLLM_LOGGING_PREFIX text, when any
    logger: str | None = None  # JSON lines: the logger name
    client: str | None = None  # access lines
    method: str | None = None
    path: str | None = None
    status: int | None = None


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (colours, cursor moves, OSC titles)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


_last_clock: list[tuple[tuple[str, int, tzinfo], float | None]] = []  # the previous call (key, result)


def clock_to_epoch(ts_text: str, year: int, tz: tzinfo = UTC) -> float | None:
    """`MM-DD HH:MM:SS[.fff]` in `year` and `tz` to unix seconds; None when it is not a real date."""
    key = (ts_text, year, tz)
    last = _last_clock[-1] if _last_clock else None  # one tuple read: safe across threads
    if last is not None and last[0] == key:
        return last[1]
    value = _clock_to_epoch(ts_text, year, tz)
    _last_clock[:] = [(key, value)]
    return value


def _clock_to_epoch(ts_text: str, year: int, tz: tzinfo) -> float | None:
    try:
        month, rest = ts_text[:2], ts_text[3:]
        day, clock = rest[:2], rest[3:]
        hh, mm, ss = clock[:2], clock[3:5], clock[6:8]
        frac = float("0." + clock[9:]) if len(clock) > 9 else 0.0
        if tz is UTC:
            stamp = calendar.timegm((year, int(month), int(day), int(hh), int(mm), int(ss), 0, 0, 0))
            datetime(year, int(month), int(day), int(hh), int(mm), int(ss))  # validates the date
            return stamp + frac
        dt = datetime(year, int(month), int(day), int(hh), int(mm), int(ss), tzinfo=tz)
        return dt.timestamp() + frac
    except (ValueError, OverflowError):
        return None


def _strip_process(text: str) -> tuple[str, str | None, int | None]:
    """Remove a leading `(Name pid=N) ` prefix (possibly repeated by nested wrappers)."""
    proc: str | None = None
    pid: int | None = None
    while text.startswith("("):
        m = _PROC.match(text)
        if not m:
            break
        proc, pid = m.group("proc").strip(), int(m.group("pid"))
        text = text[m.end():]
    return text, proc, pid


def _parse_json(text: str, proc: str | None, pid: int | None, year: int | None, tz: tzinfo) -> ParsedLine | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not ("message" in obj or "msg" in obj):
        return None
    message = str(obj.get("message", obj.get("msg", "")))
    level = obj.get("levelname", obj.get("level"))
    ts_text: str | None = None
    timestamp: float | None = None
    asctime = obj.get("asctime", obj.get("timestamp"))
    if isinstance(asctime, int | float) and not isinstance(asctime, bool) and math.isfinite(asctime):
        timestamp = float(asctime)
    elif isinstance(asctime, str):
        if re.fullmatch(r"\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?", asctime):
            ts_text = asctime.replace(",", ".")
            timestamp = clock_to_epoch(ts_text, year, tz) if year is not None else None
        else:
            try:
                dt = datetime.fromisoformat(asctime.replace(",", "."))
                timestamp = (dt if dt.tzinfo else dt.replace(tzinfo=tz)).timestamp()
            except (ValueError, OverflowError):
                timestamp = None
    raw_pid = obj.get("process")
    json_pid = raw_pid if isinstance(raw_pid, int) and not isinstance(raw_pid, bool) else None
    if json_pid is None and isinstance(raw_pid, str) and raw_pid.isdigit():
        json_pid = int(raw_pid)
    name = obj.get("processName", obj.get("vllm_process_name"))
    return ParsedLine(
        kind="json",
        message=message,
        level=str(level).upper() if level is not None else None,
        timestamp=timestamp,
        ts_text=ts_text,
        process=str(name) if name is not None else proc,
        pid=json_pid if json_pid is not None else pid,
        source=str(obj["filename"]) if "filename" in obj else None,
        lineno=obj.get("lineno") if isinstance(obj.get("lineno"), int) else None,
        logger=str(obj["name"]) if "name" in obj else None,
    )


def parse_line(line: str, *, year: int | None = None, tz: tzinfo = UTC) -> ParsedLine | None:
    """Split a log line into its parts; None for an empty line. Never raises on any text.

    `year` resolves `MM-DD HH:MM:SS` to a unix time (vLLM prints no year); without it `timestamp` is
    None and `ts_text` keeps the printed clock. `tz` is the engine host's zone (vLLM logs local time).
    """
    text = strip_ansi(line).rstrip("\r\n")
    m = _FAST_VLLM.match(text)
    if m is not None:
        proc, pid_text, level, ts_text, source, lineno = m.group("proc", "pid", "level", "ts", "file", "lineno")
        return ParsedLine(
            kind="vllm", message=text[m.end():], level=level,
            timestamp=clock_to_epoch(ts_text, year, tz) if year is not None else None, ts_text=ts_text,
            process=proc.strip() if proc else None, pid=int(pid_text) if pid_text else None, source=source,
            lineno=int(lineno),
        )
    m = _FAST_ACCESS.match(text)
    if m is not None:
        proc, pid_text, level, msg, client, method, path, status = m.group(
            "proc", "pid", "level", "msg", "client", "method", "path", "status"
        )
        return ParsedLine(
            kind="access", message=msg, level=level, process=proc.strip() if proc else None,
            pid=int(pid_text) if pid_text else None, client=client, method=method, path=path, status=int(status),
        )
    if not text.strip():
        return None
    text, proc, pid = _strip_process(text)
    if text.startswith("{"):
        parsed = _parse_json(text, proc, pid, year, tz)
        if parsed is not None:
            return parsed
    m = _HEADER.search(text, 0, _MAX_PREFIX + 80) if "] " in text or text.endswith("]") else None
    if m is not None and m.start() <= _MAX_PREFIX:
        pre = text[: m.start()]
        logging_prefix: str | None = None
        if pre:
            if not pre[-1].isspace() and not pre.endswith(("]", ")", ":", "|")):
                m = None  # the level word is part of some other text
            else:
                inner = _PROC.search(pre)
                if inner is not None and proc is None:
                    proc, pid = inner.group("proc").strip(), int(inner.group("pid"))
                    pre = pre[: inner.start()] + pre[inner.end():]
                logging_prefix = pre.strip() or None
        if m is not None:
            ts_text = m.group("ts")
            return ParsedLine(
                kind="vllm",
                message=text[m.end():],
                level=m.group("level"),
                timestamp=clock_to_epoch(ts_text, year, tz) if year is not None else None,
                ts_text=ts_text,
                process=proc,
                pid=pid,
                source=m.group("file"),
                lineno=int(m.group("lineno")),
                prefix=logging_prefix,
            )
    u = _UVICORN.match(text)
    if u is not None:
        msg = u.group("msg")
        a = _ACCESS.match(msg)
        if a is not None:
            return ParsedLine(
                kind="access", message=msg, level=u.group("level"), process=proc, pid=pid,
                client=a.group("client"), method=a.group("method"), path=a.group("path"),
                status=int(a.group("status")),
            )
        return ParsedLine(kind="raw", message=msg, level=u.group("level"), process=proc, pid=pid)
    return ParsedLine(kind="raw", message=text, process=proc, pid=pid)


# --- the periodic stats line ---------------------------------------------------------------------
_NUM = r"(?:[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)"
_PAIR = re.compile(rf"([A-Za-z][\w ]*?): ({_NUM})")
_V0_PREFIX = re.compile(rf"Prefix cache hit rate: GPU: ({_NUM}) ?%, CPU: ({_NUM}) ?%")
_KV_FETCH = re.compile(rf"KV fetch: ({_NUM}) waiting to start, ({_NUM}) in progress, ({_NUM}) completed waiting")
_ENGINE_HEAD = re.compile(r"\s*(?:Engine (?P<idx>\d+)|(?P<agg>\d+) Engines Aggregated):\s*")
_COUNT_KEYS = {
    "Avg prompt throughput": "prompt_tps", "Avg generation throughput": "gen_tps", "Running": "running",
    "Swapped": "swapped", "Pending": "waiting", "Waiting": "waiting", "Deferred": "deferred",
    "Corrupted": "corrupted", "Preemptions": "preemptions",
}
_PERCENT_KEYS = {
    "Prefix cache hit rate": "prefix_hit_rate", "External prefix cache hit rate": "external_prefix_hit_rate",
    "External Prefix cache hit rate": "external_prefix_hit_rate", "MM cache hit rate": "mm_cache_hit_rate",
}
_MAIN_KEYS = ("prompt_tps", "gen_tps", "running", "waiting")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def parse_stats(message: str) -> dict[str, float] | None:
    """The numbers of a periodic stats line (any release, keys in any order, missing keys tolerated).

    Canonical keys: prompt_tps, gen_tps, running, waiting (V0 "Pending"), swapped, deferred,
    preemptions, kv_usage and cpu_kv_usage (ratios 0..1), prefix_hit_rate (ratio), engine (index) or
    engines_aggregated, and when printed corrupted, external_prefix_hit_rate, mm_cache_hit_rate,
    kv_fetch_*. V0's separate `Prefix cache hit rate: GPU: x%, CPU: y%` line gives only the hit
    rates. Returns None for any other message (including 0.33's per-iteration detail line).
    """
    if "throughput" not in message and "reqs" not in message and "hit rate" not in message:
        return None
    head = _ENGINE_HEAD.match(message)
    body = message[head.end():] if head else message
    if body.startswith("Iteration("):
        return None
    out: dict[str, float] = {}
    try:
        for label, value in _PAIR.findall(body):
            key = _COUNT_KEYS.get(label)
            if key is not None:
                out[key] = _num(value)
            elif label.endswith("KV cache usage"):
                device = label[: -len("KV cache usage")].strip().rsplit(" ", 1)[-1]
                out["cpu_kv_usage" if device.upper() == "CPU" else "kv_usage"] = _num(value) / 100.0
            elif label in _PERCENT_KEYS:
                out[_PERCENT_KEYS[label]] = _num(value) / 100.0
        if "GPU: " in body and (m := _V0_PREFIX.search(body)):
            out["prefix_hit_rate"] = _num(m.group(1)) / 100.0
            out["cpu_prefix_hit_rate"] = _num(m.group(2)) / 100.0
        if "KV fetch: " in body and (m := _KV_FETCH.search(body)):
            out["kv_fetch_waiting"], out["kv_fetch_in_progress"], out["kv_fetch_completed_waiting"] = (
                _num(m.group(1)), _num(m.group(2)), _num(m.group(3)))
    except (ValueError, OverflowError):
        return None
    if "cpu_kv_usage" in out and "kv_usage" not in out and "Swapped:" not in body and "Pending:" not in body:
        # V1 names the device it runs on: on the CPU backend "CPU KV cache usage" is the KV cache itself
        # (only V0's line, which also has GPU usage and Swapped/Pending, means the CPU swap space).
        out["kv_usage"] = out.pop("cpu_kv_usage")
    v0_prefix_line = body.lstrip().startswith("Prefix cache hit rate: GPU:")
    if not any(k in out for k in _MAIN_KEYS) and not (v0_prefix_line and "prefix_hit_rate" in out):
        return None
    if head is not None:
        if head.group("idx") is not None:
            out["engine"] = float(int(head.group("idx")))
        else:
            out["engines_aggregated"] = float(int(head.group("agg")))
    return out


# --- Python-literal text (non-default args, Namespace(...), engine config) ----------------------------
_OPEN, _CLOSE = "([{", ")]}"


def _split_top(text: str) -> list[str]:
    """Split `a, b(c, d), 'e, f'` on the commas that are outside brackets and quotes."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _value(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


def literal_dict(text: str, sep: str = ":") -> dict[str, Any]:
    """`{...}` (sep ":") or `k=v, ...` (sep "="): a dict, failing soft to the raw text of odd values.

    Values that are not Python literals (`CompilationConfig(...)`, `torch.bfloat16`) are kept as text.
    """
    text = text.strip()
    if sep == ":":
        try:
            value = ast.literal_eval(text)
            if isinstance(value, dict):
                return {str(k): v for k, v in value.items()}
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
    out: dict[str, Any] = {}
    for part in _split_top(text)[:500]:
        key, found, raw = part.partition(sep)
        if not found:
            continue
        key = key.strip().strip("'\"")
        if key.isidentifier() or key.replace("-", "_").replace(".", "_").isidentifier():
            out[key] = _value(raw.strip())
    return out

