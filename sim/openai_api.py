"""OpenAI-compatible request validation and response bodies, shaped as vLLM shapes them."""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any

from sim import tokenizer
from sim.profiles import VersionProfile


class ApiError(Exception):
    """An error answered to the client with vLLM's JSON error shape."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def error_body(profile: VersionProfile, err: ApiError) -> dict[str, Any]:
    """Nested {"error": {...}} from 0.10, flat {"object": "error", ...} before."""
    inner = {"message": err.message, "type": err.err_type, "param": err.param, "code": err.status}
    if profile.nested_error:
        return {"error": inner}
    return {"object": "error", **inner}


@dataclass
class GenerationRequest:
    """A validated completion or chat request."""

    kind: str  # "completions" | "chat"
    model: str
    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    priority: int
    n: int
    eos_after: int | None = None  # the sim's stand-in model emits EOS after this many tokens


# The key in `vllm_xargs` (vLLM's extra sampling arguments for extensions; ignored by real vLLM
# unless a plugin reads it) that tells the sim's stand-in model where its EOS falls.
EOS_AFTER_XARG = "sim_eos_after_tokens"


def _eos_after(body: dict[str, Any]) -> int | None:
    xargs = body.get("vllm_xargs")
    value = xargs.get(EOS_AFTER_XARG) if isinstance(xargs, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _int_field(body: dict[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name}: Input should be a valid integer", param=name)
    return value


def parse_generation(kind: str, body: Any, *, served_name: str, model_path: str, max_model_len: int,
                     profile: VersionProfile, priority_enabled: bool) -> GenerationRequest:
    """Validate a body like vLLM does (400 for bad fields, 404 for an unknown model)."""
    if not isinstance(body, dict):
        raise ApiError(400, "Input should be a valid dictionary or object to extract fields from")
    model = body.get("model") or served_name
    if model not in (served_name, model_path):
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    if kind == "completions":
        if "prompt" not in body:
            raise ApiError(400, "[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}]")
        prompt = body["prompt"]
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = tokenizer.encode(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
        else:
            raise ApiError(400, "prompt must be a string, a list of token ids, or a list with one of those",
                           param="prompt")
        if not ids:
            raise ApiError(400, "Prompt cannot be empty", param="prompt")
        default_max = 16
    else:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "[{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required'}]")
        if not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "messages: each message must be an object with a role and content",
                           param="messages")
        ids = tokenizer.encode_chat(messages)
        default_max = None
    max_tokens = _int_field(body, "max_completion_tokens", None) if kind == "chat" else None
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", default_max)
    n = _int_field(body, "n", 1) or 1
    priority = _int_field(body, "priority", 0) or 0
    if priority and not priority_enabled:
        raise ApiError(400, f"Got priority {priority} but Priority scheduling is not enabled.",
                       param="priority")
    check_length(len(ids), max_tokens, max_model_len, profile)
    if max_tokens is None:
        max_tokens = max_model_len - len(ids)
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options")
    include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
    return GenerationRequest(kind, model, ids, max_tokens, bool(body.get("ignore_eos", False)), stream,
                             include_usage, priority, n, _eos_after(body))


def check_length(prompt_len: int, max_tokens: int | None, max_model_len: int,
                 profile: VersionProfile) -> None:
    """The context-length checks and their messages per release (HTTP 400)."""
    if prompt_len > max_model_len or (prompt_len == max_model_len and max_tokens is None):
        if profile.context_error == "v06":
            total = prompt_len + (max_tokens or 0)
            msg = (f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                   f"{total} tokens ({prompt_len} in the messages, {max_tokens or 0} in the completion). "
                   "Please reduce the length of the messages or completion.")
        elif profile.context_error == "v033":
            msg = (f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
                   f"contains {prompt_len} input tokens, which exceeds this limit even without any output "
                   "tokens. Please reduce the length of the input prompt.")
        else:
            msg = (f"This model's maximum context length is {max_model_len} tokens. However, your request "
                   f"has {prompt_len} input tokens. Please reduce the length of the input messages.")
        raise ApiError(400, msg, param="input_tokens" if profile.context_error == "v033" else None)
    if max_tokens is not None and prompt_len + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
            f"context length is {max_model_len} tokens and your request has {prompt_len} input tokens "
            f"({max_tokens} > {max_model_len} - {prompt_len}).",
            param="max_tokens",
        )


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None}


def completion_chunk(req_id: str, created: int, model: str, text: str, finish: str | None) -> dict[str, Any]:
    return {"id": req_id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                         "stop_reason": None}], "usage": None}


def chat_chunk(req_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"id": req_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                         "stop_reason": None}]}


def full_response(kind: str, req_id: str, created: int, model: str, text: str, finish: str | None,
                  prompt: int, completion: int) -> dict[str, Any]:
    """A non-streaming completion or chat completion body."""
    if kind == "completions":
        body = completion_chunk(req_id, created, model, text, finish)
        body["choices"][0]["prompt_logprobs"] = None
    else:
        body = {"id": req_id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None,
                                                     "annotations": None, "audio": None,
                                                     "function_call": None, "tool_calls": [],
                                                     "reasoning_content": None},
                             "logprobs": None, "finish_reason": finish, "stop_reason": None}],
                "prompt_logprobs": None}
    body["usage"] = usage(prompt, completion)
    body["service_tier"] = None
    body["system_fingerprint"] = None
    body["kv_transfer_params"] = None
    return body


def models_body(served_name: str, model_path: str, max_model_len: int, created: int | None = None) -> dict[str, Any]:
    created = int(time.time()) if created is None else created
    return {"object": "list", "data": [{
        "id": served_name, "object": "model", "created": created, "owned_by": "vllm", "root": model_path,
        "parent": None, "max_model_len": max_model_len,
        "permission": [{"id": f"modelperm-{zlib.crc32(served_name.encode()):016x}", "object": "model_permission",
                        "created": created, "allow_create_engine": False, "allow_sampling": True,
                        "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                        "allow_fine_tuning": False, "organization": "*", "group": None,
                        "is_blocking": False}],
    }]}
