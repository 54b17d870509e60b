"""Request streams for the sim and for load generation (../shared/reference/sim-model.md §3).

Pure and deterministic: `generate` draws a synthetic workload from a `WorkloadSpec` with Python's
`random` (same seed ⇒ same list), `load_trace` replays a public trace (Azure LLM inference,
BurstGPT, Mooncake or a generic CSV/JSONL), and `prompt_token_ids` / `prompt_text` turn a
`RequestSpec` into the prompt actually sent, with shared templates for prefix groups.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ARRIVALS = ("poisson", "gamma")


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload: when it arrives and how big it is."""

    index: int
    arrival_s: float  # offset from the start of the run
    prompt_tokens: int
    output_tokens: int
    long: bool  # prompt_tokens >= long_threshold
    prefix_group: int | None = None
    prefix_tokens: int = 0  # tokens of the shared template at the start of the prompt
    priority: int = 0


# A schedule step: (at time t, rate = rate_qps * m, long_share = s when s is not None).
Step = tuple[float, float, float | None]


@dataclass(frozen=True)
class WorkloadSpec:
    """A synthetic workload (§3.1-3.3): arrivals, prompt and output lengths, prefix sharing.

    The run lasts `duration_s` unless `num_requests` is set, which then wins. `schedule` holds
    incident steps `(t, m, s)`: from time t on the rate is `rate_qps * m` (m is relative to
    `rate_qps`, not cumulative; m = 0 pauses arrivals) and, when s is not None, the long share is s.
    """

    rate_qps: float = 1.0
    duration_s: float | None = 60.0
    num_requests: int | None = None
    arrival: str = "poisson"  # "poisson" | "gamma"
    burstiness: float = 1.0  # gamma shape as vLLM's --burstiness: CV = 1/sqrt(b)
    prompt_median: float = 400.0
    prompt_sigma: float = 0.8
    prompt_cap: int = 4000
    long_share: float = 0.0  # share of prompts drawn from U(long_min, long_max)
    long_min: int = 4096
    long_max: int = 8192
    long_threshold: int = 5120
    output_median: float = 50.0
    output_sigma: float = 0.7
    output_cap: int = 1024
    prefix_share: float = 0.0  # share of requests starting with one of n_templates templates
    n_templates: int = 4
    template_tokens: int = 256
    seed: int = 0
    schedule: tuple[Step, ...] = field(default=())
    normalize: bool = True  # with num_requests and no schedule: last arrival at N/rate, as vLLM

    def __post_init__(self) -> None:
        for problem in _spec_problems(self):
            raise ValueError(problem)


def _spec_problems(s: WorkloadSpec) -> Iterator[str]:
    if not s.rate_qps > 0:  # also catches NaN
        yield f"rate_qps must be > 0, got {s.rate_qps}"
    if s.num_requests is None:
        if s.duration_s is None:
            yield "give duration_s or num_requests"
        elif not s.duration_s > 0:
            yield f"duration_s must be > 0, got {s.duration_s}"
        elif math.isinf(s.rate_qps):
            yield "an infinite rate needs num_requests"
        elif math.isinf(s.duration_s):
            yield "duration_s must be finite"
    elif s.num_requests < 0:
        yield f"num_requests must be >= 0, got {s.num_requests}"
    if s.arrival not in ARRIVALS:
        yield f"arrival must be one of {', '.join(ARRIVALS)}, got {s.arrival!r}"
    if not (s.burstiness > 0 and math.isfinite(s.burstiness)):
        yield f"burstiness must be a positive finite number, got {s.burstiness}"
    for name in ("prompt_median", "output_median"):
        if not getattr(s, name) > 0:
            yield f"{name} must be > 0, got {getattr(s, name)}"
    for name in ("prompt_sigma", "output_sigma"):
        if not getattr(s, name) >= 0:
            yield f"{name} must be >= 0, got {getattr(s, name)}"
    for name in ("prompt_cap", "output_cap", "long_min", "n_templates", "template_tokens"):
        if getattr(s, name) < 1:
            yield f"{name} must be >= 1, got {getattr(s, name)}"
    if s.long_max < s.long_min:
        yield f"long_max ({s.long_max}) must be >= long_min ({s.long_min})"
    for name in ("long_share", "prefix_share"):
        if not 0.0 <= getattr(s, name) <= 1.0:
            yield f"{name} must be within [0, 1], got {getattr(s, name)}"
    last_t = 0.0
    for i, step in enumerate(s.schedule):
        if len(step) != 3:
            yield f"schedule step {i} must be (t, multiplier, long_share or None), got {step!r}"
            continue
        t, m, share = step
        if not (t >= last_t and math.isfinite(t)):
            yield f"schedule step {i}: times must be finite, >= 0 and non-decreasing, got {t}"
        if not (m >= 0 and math.isfinite(m)):
            yield f"schedule step {i}: rate multiplier must be >= 0, got {m}"
        if share is not None and not 0.0 <= share <= 1.0:
            yield f"schedule step {i}: long share must be within [0, 1], got {share}"
        if math.isfinite(t):
            last_t = max(last_t, t)


# --- synthetic generation ---------------------------------------------------------------------


def _segments(spec: WorkloadSpec) -> list[tuple[float, float, float]]:
    """(start time, rate, long share) pieces of the piecewise-constant schedule."""
    pieces = [(0.0, spec.rate_qps, spec.long_share)]
    for t, m, share in spec.schedule:
        _, _, current_share = pieces[-1]
        piece = (float(t), spec.rate_qps * m, current_share if share is None else share)
        if piece[0] == pieces[-1][0]:
            pieces[-1] = piece
        else:
            pieces.append(piece)
    return pieces


def _arrivals(spec: WorkloadSpec, rng: random.Random) -> list[float]:
    """Arrival offsets: a unit-mean gamma renewal process mapped through the cumulative rate.

    Operational time u grows by Gamma(b, 1/b) gaps (b = 1: Poisson); the arrival is the t where
    the integral of the rate reaches u, which handles rate steps exactly.
    """
    limit = spec.num_requests
    horizon = math.inf if limit is not None else float(spec.duration_s or 0.0)
    if math.isinf(spec.rate_qps):
        return [0.0] * (limit or 0)
    shape = 1.0 if spec.arrival == "poisson" else spec.burstiness
    pieces = _segments(spec)
    out: list[float] = []
    k = 0  # current piece
    cum_at_k = 0.0  # integral of the rate up to pieces[k] start
    u = 0.0
    while limit is None or len(out) < limit:
        gap = rng.expovariate(1.0) if shape == 1.0 else rng.gammavariate(shape, 1.0 / shape)
        u += gap
        # Advance to the piece in which the cumulative rate reaches u.
        while k + 1 < len(pieces):
            start, rate, _ = pieces[k]
            span = (pieces[k + 1][0] - start) * rate
            if cum_at_k + span >= u:
                break
            cum_at_k += span
            k += 1
        start, rate, _ = pieces[k]
        if rate <= 0:  # the last piece has rate 0: no more arrivals ever
            break
        t = start + (u - cum_at_k) / rate
        if t >= horizon:
            break
        out.append(t)
    if (
        spec.normalize
        and limit is not None
        and not spec.schedule
        and out
        and out[-1] > 0
    ):
        factor = (limit / spec.rate_qps) / out[-1]
        out = [t * factor for t in out]
    return out


def _share_at(pieces: list[tuple[float, float, float]], t: float) -> float:
    share = pieces[0][2]
    for start, _, s in pieces:
        if start > t:
            break
        share = s
    return share


def _normal(rng: random.Random) -> float:
    """Box-Muller from exactly two uniforms, so every request consumes the same draws."""
    u1, u2 = rng.random(), rng.random()
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


def _lognormal_int(rng: random.Random, median: float, sigma: float, cap: int) -> int:
    value = median * math.exp(sigma * _normal(rng))
    return max(1, min(cap, round(value)))


def generate(spec: WorkloadSpec) -> list[RequestSpec]:
    """Draw the request list of `spec`, sorted by arrival; same spec (and seed) ⇒ same list.

    Arrivals and sizes use separate streams derived from `random.Random(spec.seed)` and every
    request consumes a fixed number of draws, so changing e.g. long_share keeps the arrival times
    and changes only the requests that flip class.
    """
    master = random.Random(spec.seed)
    arrival_rng = random.Random(master.getrandbits(64))
    size_rng = random.Random(master.getrandbits(64))
    pieces = _segments(spec)
    out: list[RequestSpec] = []
    for index, t in enumerate(_arrivals(spec, arrival_rng)):
        short_len = _lognormal_int(size_rng, spec.prompt_median, spec.prompt_sigma, spec.prompt_cap)
        u_long, u_long_len = size_rng.random(), size_rng.random()
        output = _lognormal_int(size_rng, spec.output_median, spec.output_sigma, spec.output_cap)
        u_prefix, u_group = size_rng.random(), size_rng.random()
        if u_long < _share_at(pieces, t):
            span = spec.long_max - spec.long_min + 1
            prompt = spec.long_min + min(span - 1, int(u_long_len * span))
        else:
            prompt = short_len
        group: int | None = None
        prefix = 0
        if u_prefix < spec.prefix_share:
            group = min(spec.n_templates - 1, int(u_group * spec.n_templates))
            prefix = min(spec.template_tokens, prompt)
        out.append(
            RequestSpec(
                index=index,
                arrival_s=t,
                prompt_tokens=prompt,
                output_tokens=output,
                long=prompt >= spec.long_threshold,
                prefix_group=group,
                prefix_tokens=prefix,
            )
        )
    return out


# Presets of §3.5. Rates are absolute; pick them relative to the engine's capacity.
WORKLOAD_PRESETS = ("healthy-chat", "seed-longtail", "bursty", "surge", "long-surge")


def workload_preset(
    name: str,
    *,
    rate_qps: float = 1.0,
    duration_s: float = 60.0,
    seed: int = 0,
    incident_at_s: float | None = None,
) -> WorkloadSpec:
    """A §3.5 preset; `incident_at_s` (default: half the duration) places surges."""
    base = WorkloadSpec(rate_qps=rate_qps, duration_s=duration_s, seed=seed)
    at = duration_s / 2 if incident_at_s is None else incident_at_s
    if name == "healthy-chat":
        return base
    if name == "seed-longtail":
        return replace(base, long_share=0.1)
    if name == "bursty":
        return replace(base, arrival="gamma", burstiness=0.1)  # CV ≈ 3.2
    if name == "surge":
        return replace(base, schedule=((at, 2.0, None),))
    if name == "long-surge":
        return replace(base, long_share=0.02, schedule=((at, 1.0, 0.25),))
    raise ValueError(f"unknown workload preset {name!r}; known: {', '.join(WORKLOAD_PRESETS)}")


# --- prompts ----------------------------------------------------------------------------------


def _stream_rng(seed: int, *parts: object) -> random.Random:
    # Seeding with a str hashes it with SHA-512: stable across processes and PYTHONHASHSEED.
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def prompt_token_ids(
    spec: RequestSpec, *, seed: int, vocab_size: int = 32000, low_id: int = 100
) -> list[int]:
    """Exactly `spec.prompt_tokens` ids in [low_id, vocab_size); a prefix group shares its head."""
    if vocab_size <= low_id:
        raise ValueError(f"vocab_size ({vocab_size}) must exceed low_id ({low_id})")
    prefix = min(spec.prefix_tokens, spec.prompt_tokens) if spec.prefix_group is not None else 0
    ids: list[int] = []
    if prefix:
        rng = _stream_rng(seed, "template", spec.prefix_group)
        ids = [rng.randrange(low_id, vocab_size) for _ in range(prefix)]
    rng = _stream_rng(seed, "request", spec.index)
    ids.extend(rng.randrange(low_id, vocab_size) for _ in range(spec.prompt_tokens - prefix))
    return ids


_CONSONANTS = "bdfghklmnprstvz"
_VOWELS = "aeiou"
# 5,625 purely alphabetic pseudo-words ("bada" .. "zuzu"): one token each for a word tokenizer.
_WORDS: tuple[str, ...] = tuple(
    a + b + c + d for a in _CONSONANTS for b in _VOWELS for c in _CONSONANTS for d in _VOWELS
)


def prompt_text(spec: RequestSpec, seed: int) -> str:
    """`spec.prompt_tokens` space-separated words; a prefix group's template words come first."""
    prefix = min(spec.prefix_tokens, spec.prompt_tokens) if spec.prefix_group is not None else 0
    words: list[str] = []
    if prefix:
        rng = _stream_rng(seed, "template-text", spec.prefix_group)
        words = [rng.choice(_WORDS) for _ in range(prefix)]
    rng = _stream_rng(seed, "request-text", spec.index)
    words.extend(rng.choice(_WORDS) for _ in range(spec.prompt_tokens - prefix))
    return " ".join(words)


# --- traces -----------------------------------------------------------------------------------


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
