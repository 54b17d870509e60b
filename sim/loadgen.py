"""HTTP load generator for the sim and for real vLLM, measuring like `vllm bench serve` (§1.8).

`run_load` sends each `RequestSpec` at its arrival time (real time, relative to the start) to an
OpenAI-compatible server, streams the answer and records TTFT, ITLs, E2E and token counts per
request; it never raises for a request's failure. `summarize` and `format_summary` produce the
figures and the table of `vllm bench serve`, overall and per request class (short/long).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from sim.workload import RequestSpec, prompt_text, prompt_token_ids

APIS = ("completions", "chat")
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
_ERROR_BODY_CHARS = 500


class TargetError(Exception):
    """The target server cannot be reached or does not answer /v1/models usefully."""


@dataclass
class RequestResult:
    """What happened to one request; times in seconds, offsets from the run's start."""

    index: int
    long: bool
    prompt_tokens: int  # as requested
    max_tokens: int  # output tokens requested
    scheduled_s: float  # arrival offset from the workload
    sent_s: float | None = None  # when it was sent (after waiting for a concurrency slot)
    success: bool = False
    status: int | None = None  # HTTP status, None when no response arrived
    error: str = ""
    ttft_s: float | None = None
    itls_s: list[float] = field(default_factory=list)
    e2e_s: float | None = None
    output_tokens: int = 0  # from usage when present, else the number of content chunks
    usage_prompt_tokens: int | None = None
    chunks: int = 0  # content chunks received
    finish_reason: str | None = None

    @property
    def tpot_s(self) -> float:
        """(E2E - TTFT) / (output tokens - 1), 0 when output <= 1 (as vLLM's bench)."""
        if self.e2e_s is None or self.ttft_s is None or self.output_tokens <= 1:
            return 0.0
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass
class LoadResult:
    """A whole run: the settings and one `RequestResult` per request, in the order given."""

    base_url: str
    model: str | None
    api: str
    stream: bool
    max_concurrency: int | None
    duration_s: float
    results: list[RequestResult]


@dataclass(frozen=True)
class LoadProgress:
    """A snapshot passed to the `progress` callback."""

    elapsed_s: float
    total: int
    sent: int
    completed: int
    failed: int

    @property
    def in_flight(self) -> int:
        return self.sent - self.completed - self.failed


def normalize_base_url(url: str) -> str:
    """'host:8000', 'http://host:8000/' or '.../v1' -> 'http://host:8000'."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    return url.removesuffix("/v1")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


async def fetch_models(client: httpx.AsyncClient, base_url: str, *, timeout_s: float = 10.0) -> list[str]:
    """Model ids served at base_url (GET /v1/models); raises TargetError with a clear message."""
    url = f"{normalize_base_url(base_url)}/v1/models"
    try:
        resp = await client.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise TargetError(f"cannot reach {url}: {_describe(exc)}") from None
    if resp.status_code != 200:
        raise TargetError(f"GET {url} answered HTTP {resp.status_code}: {resp.text[:_ERROR_BODY_CHARS]}")
    try:
        data = resp.json()
        models = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        raise TargetError(f"GET {url} did not return an OpenAI model list: {resp.text[:200]!r}") from None
    if not models:
        raise TargetError(f"GET {url} lists no models")
    return models


def _payload(
    spec: RequestSpec,
    *,
    model: str,
    api: str,
    stream: bool,
    seed: int,
    use_token_ids: bool,
    vocab_size: int,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "stream": stream, "ignore_eos": True, "temperature": 0.0}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt_text(spec, seed)}]
        body["max_completion_tokens"] = spec.output_tokens
    else:
        if use_token_ids:
            body["prompt"] = prompt_token_ids(spec, seed=seed, vocab_size=vocab_size)
        else:
            body["prompt"] = prompt_text(spec, seed)
        body["max_tokens"] = spec.output_tokens
    if stream:
        body["stream_options"] = {"include_usage": True}
    if spec.priority:
        body["priority"] = spec.priority
    return body


def _chunk_text(api: str, choice: dict[str, Any]) -> str | None:
    """The chunk's text when it counts as a token chunk (as vLLM's bench: even if empty), else None."""
    if api == "chat":
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            return None
        content = delta.get("content") or delta.get("reasoning_content")
        return content if isinstance(content, str) and content else None
    text = choice.get("text")
    if not isinstance(text, str) or (not text and choice.get("finish_reason")):
        return None  # a trailing empty chunk that only carries finish_reason is not a token
    return text


def _error_message(data: dict[str, Any]) -> str:
    err = data.get("error", data)
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def _apply_usage(result: RequestResult, usage: object) -> None:
    if isinstance(usage, dict):
        if isinstance(usage.get("completion_tokens"), int):
            result.output_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            result.usage_prompt_tokens = usage["prompt_tokens"]


async def _read_stream(resp: httpx.Response, result: RequestResult, api: str, start: float) -> None:
    """Consume an SSE answer into result (TTFT, ITLs, usage); sets success or error."""
    last = start
    usage_tokens: int | None = None
    done = False
    async for raw in resp.aiter_lines():
        line = raw.strip()
        if not line or line.startswith(":") or not line.startswith("data:"):
            continue
        data_text = line[5:].strip()
        if data_text == "[DONE]":
            done = True
            break
        try:
            data = json.loads(data_text)
        except json.JSONDecodeError:
            result.error = f"malformed SSE chunk: {data_text[:200]!r}"
            return
        if not isinstance(data, dict):
            result.error = f"malformed SSE chunk (not an object): {data_text[:200]!r}"
            return
        if "error" in data or data.get("object") == "error":
            result.error = f"error in stream: {_error_message(data)}"[:_ERROR_BODY_CHARS]
            return
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            if choice.get("finish_reason"):
                result.finish_reason = str(choice["finish_reason"])
            if _chunk_text(api, choice) is not None:
                now = time.perf_counter()
                if result.ttft_s is None:
                    result.ttft_s = now - start
                else:
                    result.itls_s.append(now - last)
                last = now
                result.chunks += 1
        if data.get("usage"):
            _apply_usage(result, data["usage"])
            usage_tokens = result.output_tokens
    result.e2e_s = time.perf_counter() - start
    if not done:
        result.error = "stream ended without 'data: [DONE]'"
    elif result.ttft_s is None:
        result.error = "no content received"
    else:
        if usage_tokens is None:
            result.output_tokens = result.chunks
        result.success = True


async def _read_whole(resp: httpx.Response, result: RequestResult, api: str, start: float) -> None:
    body = await resp.aread()
    now = time.perf_counter()
    try:
        data = json.loads(body)
        choice = data["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        result.error = f"malformed response body: {body[:200]!r}"
        return
    result.ttft_s = result.e2e_s = now - start
    result.chunks = 1
    if isinstance(choice, dict) and choice.get("finish_reason"):
        result.finish_reason = str(choice["finish_reason"])
    result.output_tokens = 1
    _apply_usage(result, data.get("usage"))
    result.success = True


async def _send(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    result: RequestResult,
    *,
    api: str,
    stream: bool,
    timeout_s: float,
    t0: float,
) -> None:
    start = time.perf_counter()
    result.sent_s = start - t0
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=body) as resp:
                result.status = resp.status_code
                if resp.status_code != 200:
                    text = (await resp.aread()).decode("utf-8", "replace")
                    result.error = f"HTTP {resp.status_code}: {text.strip()[:_ERROR_BODY_CHARS]}"
                elif stream:
                    await _read_stream(resp, result, api, start)
                else:
                    await _read_whole(resp, result, api, start)
    except TimeoutError:
        result.error = f"timed out after {timeout_s:g} s"
    except httpx.HTTPError as exc:
        result.error = _describe(exc)[:_ERROR_BODY_CHARS]
    except Exception as exc:  # never raise out of run_load: record anything else too
        result.error = f"unexpected {_describe(exc)}"[:_ERROR_BODY_CHARS]
    if result.e2e_s is None:
        result.e2e_s = time.perf_counter() - start


async def run_load(
    base_url: str,
    requests: list[RequestSpec],
    *,
    model: str | None = None,
    api: str = "completions",
    stream: bool = True,
    max_concurrency: int | None = None,
    timeout_s: float = 600,
    seed: int = 0,
    use_token_ids: bool = True,
    vocab_size: int = 32000,
    client: httpx.AsyncClient | None = None,
    progress: Callable[[LoadProgress], None] | None = None,
    progress_interval_s: float = 5.0,
) -> LoadResult:
    """Send `requests` at their arrival offsets and measure them; per-request errors are recorded.

    The model is read from GET /v1/models when not given; if that fails, every request is
    recorded as failed with the reason. `progress` is called every `progress_interval_s` seconds
    and once at the end.
    """
    if api not in APIS:
        raise ValueError(f"api must be one of {', '.join(APIS)}, got {api!r}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    base = normalize_base_url(base_url)
    # Send in arrival order; report in the order given (positions, so duplicate indices are fine).
    ordered = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, i))
    results = [
        RequestResult(
            index=r.index,
            long=r.long,
            prompt_tokens=r.prompt_tokens,
            max_tokens=r.output_tokens,
            scheduled_s=r.arrival_s,
        )
        for r in requests
    ]
    own_client = client is None
    http = client or httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
        limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
    )
    t0 = time.perf_counter()
    counts = {"sent": 0, "completed": 0, "failed": 0}

    def snapshot() -> LoadProgress:
        return LoadProgress(
            elapsed_s=time.perf_counter() - t0,
            total=len(ordered),
            sent=counts["sent"],
            completed=counts["completed"],
            failed=counts["failed"],
        )

    async def ticker() -> None:
        assert progress is not None
        while True:
            await asyncio.sleep(progress_interval_s)
            progress(snapshot())

    try:
        if model is None:
            try:
                model = (await fetch_models(http, base, timeout_s=min(timeout_s, 30.0)))[0]
            except TargetError as exc:
                for res in results:
                    res.error = f"model discovery failed: {exc}"
                return LoadResult(base, None, api, stream, max_concurrency, 0.0, results)
        url = f"{base}/v1/chat/completions" if api == "chat" else f"{base}/v1/completions"
        semaphore = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        tick = asyncio.create_task(ticker()) if progress is not None else None
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        start_loop = loop.time()

        async def one(position: int) -> None:
            spec, res = requests[position], results[position]
            body = _payload(
                spec,
                model=str(model),
                api=api,
                stream=stream,
                seed=seed,
                use_token_ids=use_token_ids,
                vocab_size=vocab_size,
            )
            if semaphore is None:
                counts["sent"] += 1
                await _send(http, url, body, res, api=api, stream=stream, timeout_s=timeout_s, t0=t0)
            else:
                async with semaphore:
                    counts["sent"] += 1
                    await _send(http, url, body, res, api=api, stream=stream, timeout_s=timeout_s, t0=t0)
            counts["completed" if res.success else "failed"] += 1

        tasks: list[asyncio.Task[None]] = []
        try:
            for position in ordered:
                delay = start_loop + requests[position].arrival_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(position)))
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            if tick is not None:
                tick.cancel()
        duration = time.perf_counter() - t0
        if progress is not None:
            progress(snapshot())
        return LoadResult(base, model, api, stream, max_concurrency, duration, results)
    finally:
        if own_client:
            await http.aclose()


# --- summary ----------------------------------------------------------------------------------


def _percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stats(prefix: str, values_s: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    ms = [v * 1000.0 for v in values_s]
    n = len(ms)
    mean = sum(ms) / n if n else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in ms) / n) if n else 0.0  # population, as np.std
    out = {
        f"mean_{prefix}_ms": mean,
        f"median_{prefix}_ms": _percentile(ms, 50),
        f"std_{prefix}_ms": std,
    }
    for p in percentiles:
        out[f"p{p:g}_{prefix}_ms"] = _percentile(ms, p)
    return out


def _good(r: RequestResult, slo_s: dict[str, float]) -> bool:
    values = {"ttft": r.ttft_s or 0.0, "tpot": r.tpot_s, "e2el": r.e2e_s or 0.0}
    return all(values[k] <= limit for k, limit in slo_s.items())


def _summarize_group(
    results: Sequence[RequestResult],
    duration: float,
    slo_s: dict[str, float] | None,
    percentiles: Sequence[float],
) -> dict[str, Any]:
    ok = [r for r in results if r.success]
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    out: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(ok)),
        "request_goodput": per_s(sum(_good(r, slo_s) for r in ok)) if slo_s else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
    }
    out |= _stats("ttft", [r.ttft_s or 0.0 for r in ok], percentiles)
    out |= _stats("tpot", [r.tpot_s for r in ok], percentiles)
    out |= _stats("itl", [x for r in ok for x in r.itls_s], percentiles)
    out |= _stats("e2el", [r.e2e_s or 0.0 for r in ok], percentiles)
    return out


def _peaks(results: Sequence[RequestResult]) -> tuple[float, int]:
    """Peak output tokens per 1-s bucket (chunk times) and peak concurrent requests."""
    buckets: dict[int, float] = {}
    edges: list[tuple[float, int]] = []
    for r in results:
        if r.sent_s is None:
            continue
        edges.append((r.sent_s, 1))
        edges.append((r.sent_s + (r.e2e_s or 0.0), -1))
        if r.success and r.ttft_s is not None:
            t = r.sent_s + r.ttft_s
            times = [t]
            for gap in r.itls_s:
                t += gap
                times.append(t)
            per_chunk = r.output_tokens / len(times)  # 1 unless chunks carry several tokens
            for t in times:
                buckets[int(t)] = buckets.get(int(t), 0.0) + per_chunk
    running = peak = 0
    for _, delta in sorted(edges, key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    return float(max(buckets.values(), default=0)), peak


def summarize(
    result: LoadResult,
    *,
    goodput_slo: dict[str, float] | None = None,
    percentiles: Sequence[float] = (99.0,),
) -> dict[str, Any]:
    """Figures of `vllm bench serve` (times in ms), overall and per class ("short", "long").

    `goodput_slo` maps "ttft", "tpot", "e2el" to limits in ms (vLLM's --goodput); a request is
    good when it completed and meets all of them.
    """
    slo_s: dict[str, float] | None = None
    if goodput_slo:
        unknown = set(goodput_slo) - set(GOODPUT_METRICS)
        if unknown:
            raise ValueError(
                f"unknown goodput metric(s) {', '.join(sorted(unknown))}; use {', '.join(GOODPUT_METRICS)}"
            )
        slo_s = {k: v / 1000.0 for k, v in goodput_slo.items()}
    peak_tput, peak_conc = _peaks(result.results)
    errors: dict[str, int] = {}
    for r in result.results:
        if not r.success:
            key = f"HTTP {r.status}" if r.status not in (None, 200) else r.error.split(":")[0]
            errors[key] = errors.get(key, 0) + 1
    summary: dict[str, Any] = {
        "base_url": result.base_url,
        "model": result.model,
        "api": result.api,
        "num_prompts": len(result.results),
        "max_concurrency": result.max_concurrency,
        "duration": result.duration_s,
        "goodput_slo_ms": dict(goodput_slo) if goodput_slo else None,
        "percentiles": list(percentiles),
    }
    summary |= _summarize_group(result.results, result.duration_s, slo_s, percentiles)
    summary["max_output_tokens_per_s"] = peak_tput
    summary["max_concurrent_requests"] = peak_conc
    summary["errors"] = errors
    summary["classes"] = {
        name: _summarize_group(
            [r for r in result.results if r.long == is_long], result.duration_s, slo_s, percentiles
        )
        for name, is_long in (("short", False), ("long", True))
    }
    return summary


def _latency_block(lines: list[str], s: dict[str, Any], key: str, label: str, title: str) -> None:
    lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
    lines.append("{:<40} {:<10.2f}".format(f"Mean {label} (ms):", s[f"mean_{key}_ms"]))
    lines.append("{:<40} {:<10.2f}".format(f"Median {label} (ms):", s[f"median_{key}_ms"]))
    for p in s.get("percentiles", [99.0]):
        lines.append("{:<40} {:<10.2f}".format(f"P{p:g} {label} (ms):", s[f"p{p:g}_{key}_ms"]))


def format_summary(summary: dict[str, Any]) -> str:
    """The `============ Serving Benchmark Result ============` table, then per-class lines."""
    s = summary
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append("{:<40} {:<10}".format("Successful requests:", s["completed"]))
    lines.append("{:<40} {:<10}".format("Failed requests:", s["failed"]))
    if s.get("max_concurrency") is not None:
        lines.append("{:<40} {:<10}".format("Maximum request concurrency:", s["max_concurrency"]))
    lines.append("{:<40} {:<10.2f}".format("Benchmark duration (s):", s["duration"]))
    lines.append("{:<40} {:<10}".format("Total input tokens:", s["total_input_tokens"]))
    lines.append("{:<40} {:<10}".format("Total generated tokens:", s["total_output_tokens"]))
    lines.append("{:<40} {:<10.2f}".format("Request throughput (req/s):", s["request_throughput"]))
    if s.get("request_goodput") is not None:
        lines.append("{:<40} {:<10.2f}".format("Request goodput (req/s):", s["request_goodput"]))
    lines.append("{:<40} {:<10.2f}".format("Output token throughput (tok/s):", s["output_throughput"]))
    lines.append(
        "{:<40} {:<10.2f}".format("Peak output token throughput (tok/s):", s["max_output_tokens_per_s"])
    )
    lines.append("{:<40} {:<10}".format("Peak concurrent requests:", s["max_concurrent_requests"]))
    lines.append("{:<40} {:<10.2f}".format("Total Token throughput (tok/s):", s["total_token_throughput"]))
    _latency_block(lines, s, "ttft", "TTFT", "Time to First Token")
    _latency_block(lines, s, "tpot", "TPOT", "Time per Output Token (excl. 1st token)")
    _latency_block(lines, s, "itl", "ITL", "Inter-token Latency")
    _latency_block(lines, s, "e2el", "E2EL", "End-to-end Latency")
    classes = s.get("classes") or {}
    for name in ("short", "long"):
        c = classes.get(name)
        if not c or c["completed"] + c["failed"] == 0:
            continue
        lines.append("{s:{c}^{n}}".format(s=f" Class: {name} ", n=50, c="-"))
        counts = f"{c['completed']} / {c['failed']}"
        lines.append("{:<40} {:<10}".format("Successful / failed requests:", counts))
        if c.get("request_goodput") is not None:
            lines.append("{:<40} {:<10.2f}".format("Request goodput (req/s):", c["request_goodput"]))
        p = (s.get("percentiles") or [99.0])[-1]
        for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL")):
            value = f"{c[f'median_{key}_ms']:.2f} / {c[f'p{p:g}_{key}_ms']:.2f}"
            lines.append("{:<40} {:<10}".format(f"Median / P{p:g} {label} (ms):", value))
    if s.get("errors"):
        lines.append("{s:{c}^{n}}".format(s=" Errors ", n=50, c="-"))
        for key, n in sorted(s["errors"].items(), key=lambda kv: -kv[1]):
            lines.append("{:<40} {:<10}".format(f"{key[:39]}:", n))
    lines.append("=" * 50)
    return "\n".join(lines)
