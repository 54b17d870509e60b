"""Trace replay: read a public trace into `RequestSpec`s sorted by arrival (`load_trace`).

Formats: Azure LLM inference and BurstGPT (CSV), Mooncake (JSONL, prefix groups from block hashes)
and a generic CSV/JSONL; optionally gzipped. Unreadable input raises `TraceError` naming the file,
line and problem.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sim.workload_spec import RequestSpec


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file, line and problem."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line
        self.message = message


@dataclass
class _Row:
    line: int
    t: float  # seconds, any origin
    prompt: int
    output: int
    prefix_group: int | None = None
    prefix_tokens: int = 0
    priority: int = 0
    hash_ids: tuple[Any, ...] = ()


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


# Column sets, normalized (lowercase, alphanumerics only): format -> (time, prompt, output).
_CSV_FORMATS: dict[str, tuple[str, str, str]] = {
    "azure": ("timestamp", "contexttokens", "generatedtokens"),
    "burstgpt": ("timestamp", "requesttokens", "responsetokens"),
    "generic": ("arrivals", "prompttokens", "outputtokens"),
}


def _number(path: Path, line: int, column: str, raw: object, *, integer: bool) -> float:
    if isinstance(raw, bool) or raw is None or raw == "":
        raise TraceError(path, line, f"{column} is missing or empty")
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceError(path, line, f"{column} is not a number: {raw!r}") from None
    if not math.isfinite(value):
        raise TraceError(path, line, f"{column} is not finite: {raw!r}")
    if integer:
        if value != int(value):
            raise TraceError(path, line, f"{column} is not a whole number: {raw!r}")
        if value < 0:
            raise TraceError(path, line, f"{column} is negative: {raw!r}")
    return value


def _timestamp(path: Path, line: int, column: str, raw: str) -> float:
    """Seconds from a number or an ISO date-time (Azure traces: '2023-11-16 18:15:46.6805900')."""
    if not raw.strip():
        raise TraceError(path, line, f"{column} is missing or empty")
    try:
        return _number(path, line, column, raw, integer=False)
    except TraceError:
        pass
    text = raw.strip()
    # Python parses at most 6 fractional digits; Azure writes 7.
    if "." in text:
        head, _, tail = text.partition(".")
        digits = "".join(ch for ch in tail if ch.isdigit())
        rest = tail[len(digits):]
        text = f"{head}.{digits[:6]}{rest}"
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(path, line, f"{column} is neither a number nor a date-time: {raw!r}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _csv_rows(path: Path, lines: Iterable[str]) -> Iterator[_Row]:
    reader = csv.reader(lines)
    header: list[str] | None = None
    names: list[str] = []  # as written, for messages
    fmt = ""
    cols: tuple[int, int, int] = (0, 0, 0)
    extras: dict[str, int] = {}
    for record in reader:
        line = reader.line_num
        if not record or all(not cell.strip() for cell in record):
            continue
        if header is None:
            header = [_norm(c) for c in record]
            names = [c.strip() for c in record]
            for name, wanted in _CSV_FORMATS.items():
                if all(w in header for w in wanted):
                    fmt = name
                    cols = (header.index(wanted[0]), header.index(wanted[1]), header.index(wanted[2]))
                    break
            else:
                raise TraceError(
                    path,
                    line,
                    "unrecognized CSV header "
                    f"{','.join(record)!r}; expected Azure (TIMESTAMP,ContextTokens,GeneratedTokens), "
                    "BurstGPT (Timestamp,Model,Request tokens,Response tokens,...) or "
                    "generic (arrival_s,prompt_tokens,output_tokens)",
                )
            for extra in ("prefixgroup", "prefixtokens", "priority"):
                if extra in header:
                    extras[extra] = header.index(extra)
            continue
        width = max(*cols, *extras.values()) + 1
        if len(record) < width:
            raise TraceError(path, line, f"expected at least {width} columns, found {len(record)}")
        t = _timestamp(path, line, names[cols[0]], record[cols[0]])
        prompt = int(_number(path, line, names[cols[1]], record[cols[1]], integer=True))
        output = int(_number(path, line, names[cols[2]], record[cols[2]], integer=True))
        if fmt == "burstgpt" and output == 0:
            continue  # BurstGPT marks failed requests with 0 response tokens
        row = _Row(line, t, prompt, output)
        if "prefixgroup" in extras and record[extras["prefixgroup"]].strip():
            row.prefix_group = int(
                _number(path, line, "prefix_group", record[extras["prefixgroup"]], integer=True)
            )
        if "prefixtokens" in extras and record[extras["prefixtokens"]].strip():
            row.prefix_tokens = int(
                _number(path, line, "prefix_tokens", record[extras["prefixtokens"]], integer=True)
            )
        if "priority" in extras and record[extras["priority"]].strip():
            row.priority = int(_number(path, line, "priority", record[extras["priority"]], integer=False))
        yield row
    if header is None:
        raise TraceError(path, None, "the file is empty")


def _jsonl_rows(path: Path, lines: Iterable[str]) -> Iterator[_Row]:
    for line, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(path, line, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(path, line, f"expected a JSON object, found {type(obj).__name__}")
        if "input_length" in obj:  # Mooncake: timestamp in ms
            keys = ("timestamp", "input_length", "output_length")
            scale = 1e-3
        else:
            keys = ("arrival_s", "prompt_tokens", "output_tokens")
            scale = 1.0
        missing = [k for k in keys if k not in obj]
        if missing:
            raise TraceError(
                path,
                line,
                f"missing key(s) {', '.join(missing)}; expected Mooncake (timestamp, input_length, "
                "output_length) or generic (arrival_s, prompt_tokens, output_tokens)",
            )
        row = _Row(
            line,
            _number(path, line, keys[0], obj[keys[0]], integer=False) * scale,
            int(_number(path, line, keys[1], obj[keys[1]], integer=True)),
            int(_number(path, line, keys[2], obj[keys[2]], integer=True)),
        )
        if obj.get("prefix_group") is not None:
            row.prefix_group = int(_number(path, line, "prefix_group", obj["prefix_group"], integer=True))
        if obj.get("prefix_tokens") is not None:
            row.prefix_tokens = int(_number(path, line, "prefix_tokens", obj["prefix_tokens"], integer=True))
        if obj.get("priority") is not None:
            row.priority = int(_number(path, line, "priority", obj["priority"], integer=False))
        hashes = obj.get("hash_ids")
        if isinstance(hashes, list) and hashes:
            row.hash_ids = tuple(h if isinstance(h, int | str) else repr(h) for h in hashes)
        yield row


MOONCAKE_BLOCK_TOKENS = 512


def _mooncake_prefixes(rows: list[_Row]) -> None:
    """Group Mooncake rows by their first block hash; the group's prefix is its common head."""
    groups: dict[Any, list[_Row]] = {}
    for row in rows:
        if row.hash_ids and row.prefix_group is None:
            groups.setdefault(row.hash_ids[0], []).append(row)
    number = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        common = len(members[0].hash_ids)
        for other in members[1:]:
            n = 0
            for a, b in zip(members[0].hash_ids[:common], other.hash_ids, strict=False):
                if a != b:
                    break
                n += 1
            common = n
        for row in members:
            row.prefix_group = number
            row.prefix_tokens = min(row.prompt, common * MOONCAKE_BLOCK_TOKENS)
        number += 1


def load_trace(
    path: str | Path, *, time_scale: float = 1.0, long_threshold: int = 5120
) -> list[RequestSpec]:
    """Read a trace (CSV or JSONL, optionally .gz) into requests sorted by arrival.

    Arrivals are offsets from the first request multiplied by `time_scale` (0.5 replays twice as
    fast). Zero-token prompts or outputs become 1 (vLLM rejects 0), except BurstGPT rows with 0
    response tokens, which mark failed requests and are skipped.
    """
    p = Path(path)
    if not time_scale > 0 or math.isinf(time_scale):
        raise ValueError(f"time_scale must be a positive finite number, got {time_scale}")
    try:
        with _open_text(p) as handle:
            text = handle.read()
    except FileNotFoundError:
        raise TraceError(p, None, "no such file") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise TraceError(p, None, f"cannot read: {exc}") from None
    lines = text.splitlines(keepends=True)
    first = next((ln.lstrip() for ln in lines if ln.strip()), "")
    if not first:
        raise TraceError(p, None, "the file is empty")
    name = p.name.removesuffix(".gz")
    is_jsonl = name.endswith((".jsonl", ".json", ".ndjson")) or (
        not name.endswith(".csv") and first.startswith("{")
    )
    try:
        rows = list(_jsonl_rows(p, lines) if is_jsonl else _csv_rows(p, lines))
    except csv.Error as exc:
        raise TraceError(p, None, f"malformed CSV: {exc}") from None
    if not rows:
        raise TraceError(p, None, "no requests in the file")
    _mooncake_prefixes(rows)
    rows.sort(key=lambda r: r.t)  # stable: ties keep file order
    t0 = rows[0].t
    out: list[RequestSpec] = []
    for index, row in enumerate(rows):
        prompt = max(1, row.prompt)
        out.append(
            RequestSpec(
                index=index,
                arrival_s=(row.t - t0) * time_scale,
                prompt_tokens=prompt,
                output_tokens=max(1, row.output),
                long=prompt >= long_threshold,
                prefix_group=row.prefix_group,
                prefix_tokens=min(row.prefix_tokens, prompt) if row.prefix_group is not None else 0,
                priority=row.priority,
            )
        )
    return out
