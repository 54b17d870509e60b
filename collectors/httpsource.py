"""Read one engine over HTTP: /health (status and latency), /version, /v1/models and /metrics.

Every read is bounded by a timeout and returns a Sample; a failure is a Sample with `error` set,
never an exception, so one hung engine cannot stop the others from being read.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

import httpx

from collectors.scrape import ScrapeError, parse_metrics
from collectors.types import Sample

MAX_SCRAPE_BYTES = 64 * 1024 * 1024


def _describe(exc: BaseException, what: str, timeout_s: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"{what} timed out after {timeout_s:g}s"
    if isinstance(exc, httpx.ConnectError):
        return f"{what}: connection refused or host unreachable"
    if isinstance(exc, httpx.HTTPError):
        return f"{what}: {type(exc).__name__}: {exc}"
    return f"{what}: {type(exc).__name__}: {exc}"


async def read_health(client: httpx.AsyncClient, name: str, url: str, *, timeout_s: float,
                      clock: Callable[[], float] = time.time) -> Sample:
    """GET /health: the status code and how long it took."""
    started = time.monotonic()
    try:
        r = await client.get(url + "/health", timeout=timeout_s)
    except (httpx.HTTPError, OSError) as exc:
        return Sample("health", name, clock(), error=_describe(exc, "/health", timeout_s))
    return Sample("health", name, clock(), data={"status": r.status_code, "latency_s": time.monotonic() - started})


async def read_version(client: httpx.AsyncClient, name: str, url: str, *, timeout_s: float,
                       clock: Callable[[], float] = time.time) -> Sample:
    """GET /version → {"version": "0.x.y"} (every vLLM release has it)."""
    try:
        r = await client.get(url + "/version", timeout=timeout_s)
        version = r.json().get("version") if r.status_code == 200 else None
    except (httpx.HTTPError, OSError, ValueError, AttributeError) as exc:
        return Sample("version", name, clock(), error=_describe(exc, "/version", timeout_s))
    if not isinstance(version, str):
        return Sample("version", name, clock(), error=f"/version answered {r.status_code} without a version")
    return Sample("version", name, clock(), data={"version": version})


async def read_models(client: httpx.AsyncClient, name: str, url: str, *, timeout_s: float,
                      clock: Callable[[], float] = time.time) -> Sample:
    """GET /v1/models: served name and max_model_len."""
    try:
        r = await client.get(url + "/v1/models", timeout=timeout_s)
        data = r.json()["data"][0]
        info = {"model": data.get("id"), "root": data.get("root"), "max_model_len": data.get("max_model_len")}
    except (httpx.HTTPError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return Sample("models", name, clock(), error=_describe(exc, "/v1/models", timeout_s))
    return Sample("models", name, clock(), data=info)


_CONFIG_KEYS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "num_gpu_blocks", "block_size",
                "tensor_parallel_size")
_CONFIG_VALUE = re.compile(r"[\"']?(" + "|".join(_CONFIG_KEYS) + r")[\"']?\s*[=:]\s*(\d+)")


async def read_server_info(client: httpx.AsyncClient, name: str, url: str, *, timeout_s: float,
                           clock: Callable[[], float] = time.time) -> Sample:
    """GET /server_info (dev mode only; 404 otherwise): the scheduler and cache limits it reveals."""
    try:
        r = await client.get(url + "/server_info", params={"config_format": "json"}, timeout=timeout_s)
    except (httpx.HTTPError, OSError) as exc:
        return Sample("server_info", name, clock(), error=_describe(exc, "/server_info", timeout_s))
    if r.status_code != 200:  # 404 when dev mode is off: normal, not a problem
        return Sample("server_info", name, clock(), data={"dev_mode": False})
    found: dict[str, object] = {"dev_mode": True}
    for key, value in _CONFIG_VALUE.findall(r.text[:1_000_000]):
        found.setdefault(key, int(value))
    return Sample("server_info", name, clock(), data=found)


async def read_metrics(client: httpx.AsyncClient, name: str, url: str, *, timeout_s: float,
                       clock: Callable[[], float] = time.time) -> Sample:
    """GET /metrics in the classic text format (colons intact) and map it to canonical names."""
    try:
        async with client.stream("GET", url + "/metrics", timeout=timeout_s,
                                 headers={"Accept": "text/plain"}) as r:
            if r.status_code != 200:
                return Sample("metrics", name, clock(), error=f"/metrics answered HTTP {r.status_code}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in r.aiter_bytes():
                size += len(chunk)
                if size > MAX_SCRAPE_BYTES:
                    return Sample("metrics", name, clock(),
                                  error=f"/metrics is larger than {MAX_SCRAPE_BYTES // (1024 * 1024)} MiB")
                chunks.append(chunk)
    except (httpx.HTTPError, OSError) as exc:
        return Sample("metrics", name, clock(), error=_describe(exc, "/metrics", timeout_s))
    now = clock()
    text = b"".join(chunks).decode("utf-8", errors="replace")
    try:  # off the event loop: on a starved CPU a big scrape's parse must not hold up every time-out
        snapshot = await asyncio.to_thread(parse_metrics, text, now)
    except ScrapeError as exc:
        return Sample("metrics", name, now, error=f"/metrics could not be parsed: {exc}")
    return Sample("metrics", name, now, metrics=snapshot)


async def read_engine(client: httpx.AsyncClient, name: str, url: str, *, timeout_s: float,
                      with_identity: bool = True, with_health: bool = True,
                      clock: Callable[[], float] = time.time) -> list[Sample]:
    """Read health and metrics (and, the first time, version and models) concurrently."""
    reads = [read_metrics(client, name, url, timeout_s=timeout_s, clock=clock)]
    if with_health:
        reads.insert(0, read_health(client, name, url, timeout_s=timeout_s, clock=clock))
    if with_identity:
        reads += [read_version(client, name, url, timeout_s=timeout_s, clock=clock),
                  read_models(client, name, url, timeout_s=timeout_s, clock=clock),
                  read_server_info(client, name, url, timeout_s=timeout_s, clock=clock)]
    return list(await asyncio.gather(*reads))
