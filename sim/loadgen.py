"""HTTP load generator for the sim and for real vLLM, measuring like `vllm bench serve` (§1.8).

`run_load` sends each `RequestSpec` at its arrival time (real time, relative to the start) to an
OpenAI-compatible server, streams the answer and records TTFT, ITLs, E2E and token counts per
request; it never raises for a request's failure. `summarize` and `format_summary` produce the
figures and the table of `vllm bench serve`, overall and per request class (short/long).

This module schedules the requests of a run (`run_load`) and re-exports the rest, one concern a
module: `sim.loadgen_types` (what is recorded), `sim.loadgen_http` (the target, the request body,
sending one request), `sim.loadgen_answer` (reading one answer), `sim.loadgen_summary` (the
figures) and `sim.loadgen_report` (the table).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from sim.loadgen_http import APIS, build_payload, fetch_models, normalize_base_url, send_request
from sim.loadgen_report import format_summary
from sim.loadgen_summary import GOODPUT_METRICS, summarize
from sim.loadgen_types import LoadProgress, LoadResult, RequestResult, TargetError
from sim.workload import RequestSpec

__all__ = [
    "APIS",
    "GOODPUT_METRICS",
    "LoadProgress",
    "LoadResult",
    "RequestResult",
    "TargetError",
    "fetch_models",
    "format_summary",
    "normalize_base_url",
    "run_load",
    "summarize",
]


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
    ignore_eos: bool = False,
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
            body = build_payload(
                spec,
                model=str(model),
                api=api,
                stream=stream,
                seed=seed,
                use_token_ids=use_token_ids,
                vocab_size=vocab_size,
                ignore_eos=ignore_eos,
            )
            if semaphore is None:
                counts["sent"] += 1
                await send_request(http, url, body, res, api=api, stream=stream, timeout_s=timeout_s, t0=t0)
            else:
                async with semaphore:
                    counts["sent"] += 1
                    await send_request(http, url, body, res, api=api, stream=stream, timeout_s=timeout_s, t0=t0)
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
