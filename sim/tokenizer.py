"""A deterministic stand-in tokenizer: one token per word or punctuation mark."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

_PIECE = re.compile(r"\w+|[^\w\s]")
VOCAB_SIZE = 32000
_FIRST_ID = 100  # ids below are "special tokens"
_WORDS = (
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "with", "was", "on", "be",
    "by", "this", "are", "or", "from", "at", "which", "an", "have", "not", "but", "can", "all",
    "model", "token", "cache", "batch", "request", "latency", "memory", "prefill", "decode", "engine",
)


def encode(text: str) -> list[int]:
    """Token ids of a text."""
    return [zlib.crc32(p.encode()) % (VOCAB_SIZE - _FIRST_ID) + _FIRST_ID for p in _PIECE.findall(text)]


def count(text: str) -> int:
    return len(_PIECE.findall(text))


def token_text(token_id: int) -> str:
    """The text of an output token (a space and a word)."""
    return " " + _WORDS[token_id % len(_WORDS)]


def decode(token_ids: Sequence[int]) -> str:
    return "".join(token_text(t) for t in token_ids).lstrip()


def encode_chat(messages: Sequence[dict[str, object]]) -> list[int]:
    """Token ids for a chat conversation after a generic chat template."""
    ids: list[int] = []
    for msg in messages:
        ids.extend((1, 2))  # <|start_header|> role
        content = msg.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        ids.extend(encode(str(msg.get("role", ""))))
        ids.extend(encode(str(content or "")))
        ids.extend((3, 4))  # <|end_header|> ... <|eot|>
    ids.extend((1, 5, 3))  # assistant header: the generation prompt
    return ids
