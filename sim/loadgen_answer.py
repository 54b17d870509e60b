"""Reading one answer into a `RequestResult`: the SSE stream (TTFT, ITLs, usage) or a whole body.

Token chunks are counted as `vllm bench serve` counts them; times come from `time.perf_counter`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from sim.loadgen_types import ERROR_BODY_CHARS, RequestResult


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


async def read_stream(resp: httpx.Response, result: RequestResult, api: str, start: float) -> None:
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
            result.error = f"error in stream: {_error_message(data)}"[:ERROR_BODY_CHARS]
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


async def read_whole(resp: httpx.Response, result: RequestResult, api: str, start: float) -> None:
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
