"""The target server over HTTP: its base URL, model discovery (GET /v1/models), the request body
`vllm bench serve` sends, and sending one request into a `RequestResult` (never raising).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from sim.loadgen_answer import read_stream, read_whole
from sim.loadgen_types import ERROR_BODY_CHARS, RequestResult, TargetError
from sim.openai_api import EOS_AFTER_XARG
from sim.workload import RequestSpec, prompt_text, prompt_token_ids

APIS = ("completions", "chat")


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
        raise TargetError(f"GET {url} answered HTTP {resp.status_code}: {resp.text[:ERROR_BODY_CHARS]}")
    try:
        data = resp.json()
        models = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        raise TargetError(f"GET {url} did not return an OpenAI model list: {resp.text[:200]!r}") from None
    if not models:
        raise TargetError(f"GET {url} lists no models")
    return models


def build_payload(
    spec: RequestSpec,
    *,
    model: str,
    api: str,
    stream: bool,
    seed: int,
    use_token_ids: bool,
    vocab_size: int,
    ignore_eos: bool = False,
) -> dict[str, Any]:
    """The request body. With `ignore_eos` every request runs to max_tokens (finish `length`), as with
    `vllm bench serve --ignore-eos`; otherwise it ends by EOS at its drawn length (finish `stop`): the sim's
    stand-in model is told where (vllm_xargs), and max_tokens leaves one token of headroom because vLLM up
    to 0.11 checks the length cap before EOS."""
    body: dict[str, Any] = {"model": model, "stream": stream, "temperature": 0.0}
    cap = spec.output_tokens
    if ignore_eos:
        body["ignore_eos"] = True
    else:
        body["vllm_xargs"] = {EOS_AFTER_XARG: spec.output_tokens}
        cap += 1
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt_text(spec, seed)}]
        body["max_completion_tokens"] = cap
    else:
        if use_token_ids:
            body["prompt"] = prompt_token_ids(spec, seed=seed, vocab_size=vocab_size)
        else:
            body["prompt"] = prompt_text(spec, seed)
        body["max_tokens"] = cap
    if stream:
        body["stream_options"] = {"include_usage": True}
    if spec.priority:
        body["priority"] = spec.priority
    return body


async def send_request(
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
                    result.error = f"HTTP {resp.status_code}: {text.strip()[:ERROR_BODY_CHARS]}"
                elif stream:
                    await read_stream(resp, result, api, start)
                else:
                    await read_whole(resp, result, api, start)
    except TimeoutError:
        result.error = f"timed out after {timeout_s:g} s"
    except httpx.HTTPError as exc:
        result.error = _describe(exc)[:ERROR_BODY_CHARS]
    except Exception as exc:  # never raise out of run_load: record anything else too
        result.error = f"unexpected {_describe(exc)}"[:ERROR_BODY_CHARS]
    if result.e2e_s is None:
        result.e2e_s = time.perf_counter() - start
