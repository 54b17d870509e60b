"""The router's reading of a client's request body (completions or chat) and its token estimate.

Contract: a JSON object and its Prompt, or BadPrompt (HTTP 400); the estimate is a whole number >= 0."""

from __future__ import annotations

from router.tokens import BadPrompt, EstimateCounter, parse_body

_COUNTER = EstimateCounter()


def fuzz_one(data: bytes) -> None:
    kind = "chat" if data[:1] == b"c" else "completions"
    try:
        doc, prompt = parse_body(kind, data[1:])
    except BadPrompt:
        return
    assert isinstance(doc, dict)
    tokens = _COUNTER.count_now(prompt)
    assert isinstance(tokens, int) and tokens >= 0, tokens
