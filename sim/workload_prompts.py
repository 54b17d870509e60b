"""Prompts for a `RequestSpec`: token ids or text, with a prefix group's shared template at the head.

Deterministic per (seed, request index) and per (seed, prefix group), stable across processes.
"""

from __future__ import annotations

import random

from sim.workload_spec import RequestSpec


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
