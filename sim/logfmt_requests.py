"""vLLM's request log lines (`--enable-log-requests`; on by default up to 0.8) and the ignored-flags warning.

Formats from each release's RequestLogger.log_inputs (vllm/entrypoints/logger.py, 0.26+
vllm/entrypoints/serve/utils/request_logger.py), "Added request" from async_llm.py (V1) or
async_llm_engine.py (V0), and the SamplingParams.__repr__ field order of vllm/sampling_params.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.logfmt_lines import LineFormatter

_BASE = ("n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature")
_MID = ("top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "bad_words")
_TAIL = ("include_stop_str_in_output", "ignore_eos", "max_tokens", "min_tokens", "logprobs", "prompt_logprobs",
         "skip_special_tokens", "spaces_between_special_tokens")
# SamplingParams.__repr__ fields per profile.
_FIELDS_06 = (*_BASE, *_MID, *_TAIL, "truncate_prompt_tokens", "guided_decoding")
_FIELDS_08 = (*_FIELDS_06, "extra_args")
_FIELDS_011 = (*_BASE, *_MID, *_TAIL, "truncate_prompt_tokens", "structured_outputs", "extra_args")
_FIELDS_020 = (*_BASE, *_MID, "thinking_token_budget", *_TAIL, "structured_outputs", "extra_args")
_FIELDS_032 = (*_BASE, "watermarking", *_MID, "thinking_token_budget", *_TAIL, "structured_outputs", "extra_args")
_FIELDS = {"0.6": _FIELDS_06, "0.8": _FIELDS_08, "0.10": _FIELDS_08, "0.10-v0": _FIELDS_08, "0.11": _FIELDS_011,
           "0.12": _FIELDS_011, "0.20": _FIELDS_020, "0.26": _FIELDS_020, "0.32": _FIELDS_032,
           "0.33": _FIELDS_032}
# (file:line of "Received request", file:line of "Added request") per profile.
_TAGS = {
    "0.6": ("logger.py:37", "async_llm_engine.py:211"), "0.8": ("logger.py:39", "async_llm.py:252"),
    "0.10": ("logger.py:40", "async_llm.py:321"), "0.10-v0": ("logger.py:40", "async_llm_engine.py:203"),
    "0.11": ("logger.py:40", "async_llm.py:316"), "0.12": ("logger.py:47", "async_llm.py:361"),
    "0.20": ("logger.py:63", "async_llm.py:415"), "0.26": ("request_logger.py:63", "async_llm.py:415"),
    "0.32": ("request_logger.py:65", "async_llm.py:578"), "0.33": ("request_logger.py:66", "async_llm.py:587"),
}


def sampling_params_repr(profile: str, *, max_tokens: int, ignore_eos: bool, temperature: float,
                         extra_args: dict[str, Any] | None) -> str:
    """`SamplingParams(...)` as the release prints it, for the fields the sim's requests carry."""
    values: dict[str, object] = {
        "n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
        "temperature": temperature, "watermarking": None, "top_p": 1.0, "top_k": -1 if profile in ("0.6", "0.8")
        else 0, "min_p": 0.0, "seed": None, "stop": [], "stop_token_ids": [], "bad_words": [],
        "thinking_token_budget": None, "include_stop_str_in_output": False, "ignore_eos": ignore_eos,
        "max_tokens": max_tokens, "min_tokens": 0, "logprobs": None, "prompt_logprobs": None,
        "skip_special_tokens": True, "spaces_between_special_tokens": True, "truncate_prompt_tokens": None,
        "guided_decoding": None, "structured_outputs": None, "extra_args": extra_args,
    }
    return "SamplingParams(" + ", ".join(f"{k}={values[k]}" for k in _FIELDS[profile]) + ")"


def request_lines(fmt: LineFormatter, now: float, request_id: str, *, prompt: str | None,
                  prompt_ids: Sequence[int], params: str) -> list[str]:
    """The "Received request" and "Added request" records of one request."""
    name = fmt.profile.name
    received_tag, added_tag = _TAGS[name]
    if name in ("0.6", "0.8"):
        msg = (f"Received request {request_id}: prompt: {prompt!r}, params: {params}, prompt_token_ids: "
               f"{list(prompt_ids)}, lora_request: None, prompt_adapter_request: None.")
    elif name in ("0.10", "0.10-v0", "0.11"):
        msg = (f"Received request {request_id}: prompt: {prompt!r}, params: {params}, prompt_token_ids: "
               f"{list(prompt_ids)}, prompt_embeds shape: None, lora_request: None.")
    else:  # 0.12+: the prompt only at DEBUG
        msg = f"Received request {request_id}: params: {params}, lora_request: None."
    return [*fmt.emit(now, msg, tag=received_tag), *fmt.emit(now, f"Added request {request_id}.", tag=added_tag)]


def ignored_flags_line(fmt: LineFormatter, now: float, flags: Sequence[str]) -> list[str]:
    """One warning naming the `vllm serve` flags the sim accepted but does not model."""
    if not flags:
        return []
    return fmt.emit(now, "The simulated engine accepts but does not model these vLLM arguments (ignored): "
                    + ", ".join(flags), level="WARNING", tag="args")
