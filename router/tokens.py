"""Prompt token counting, pluggable: a fast estimate (default), the engine's /tokenize, a local tokenizer file."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import httpx

CHAT_TOKENS_PER_MESSAGE = 5  # role header and end-of-turn markers of a typical chat template
CHAT_TOKENS_REPLY = 3  # the assistant header that starts the generation
STR_MOST = 4.5  # characters of a JSON value's str() per byte of its JSON, at the most (1e15: 18 of 4)


class BadPrompt(ValueError):
    """A request body without a usable prompt (HTTP 400)."""


class Prompt(NamedTuple):
    """What of a request body is counted: texts (the longest of a batch), or a token id count. A NamedTuple, not a
    frozen dataclass: one is made for every request, and a frozen dataclass's __init__ sets each field through
    object.__setattr__ (0.9 us against 0.2 us, in a loop)."""

    kind: str  # "completions" | "chat"
    text: str = ""  # completions: the longest prompt text
    ids: int | None = None  # completions given as token ids: their count
    messages: tuple[str, ...] = ()  # chat: message contents
    raw_messages: Any = None


def _content(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def extract(kind: str, body: Any) -> Prompt:
    """The prompt of a /v1/completions or /v1/chat/completions body, or BadPrompt naming what is wrong."""
    if not isinstance(body, dict):
        raise BadPrompt("the request body must be a JSON object")
    if kind == "chat":
        messages = body.get("messages")
        if messages is None:
            raise BadPrompt("missing field 'messages'")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadPrompt("'messages' must be a non-empty list of objects with a role and content")
        return Prompt("chat", messages=tuple(_content(m) for m in messages), raw_messages=messages)
    if "prompt" not in body:
        raise BadPrompt("missing field 'prompt'")
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return Prompt("completions", text=prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return Prompt("completions", ids=len(prompt))
        if all(isinstance(p, str) for p in prompt):
            return Prompt("completions", text=max(prompt, key=len))
        if all(isinstance(p, list) for p in prompt):
            return Prompt("completions", ids=max(len(p) for p in prompt))
    raise BadPrompt("'prompt' must be a string, a list of strings, or a list of token ids")


_DECODER = json.JSONDecoder()


def _loads(body: bytes) -> Any:
    """json.loads(body), in one step of the C scanner for the usual body (UTF-8, an object from its first byte, nothing
    after it): json.loads on bytes sniffs the encoding and matches the white space around the document in Python
    (1.5 us against 0.4 us for a 56-byte completion request, in a loop). Anything else, error or not, goes through
    json.loads itself, so what is accepted and every error's words are json.loads's."""
    if body[:1] == b"{":
        try:
            text = body.decode()
            doc, end = _DECODER.raw_decode(text)
        except (ValueError, UnicodeDecodeError):
            return json.loads(body)
        if end == len(text):
            return doc
    return json.loads(body)


def parse_body(kind: str, body: bytes) -> tuple[dict[str, Any], Prompt]:
    """A request body as JSON and its prompt, or BadPrompt naming what is wrong (HTTP 400); JSON nested too
    deeply for the decoder is bad input too, never a RecursionError."""
    try:
        doc = _loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise BadPrompt(f"invalid JSON in the request body: {why}") from None
    prompt = extract(kind, doc)
    return doc, prompt


class TokenCounter(Protocol):
    method: str

    async def count(self, prompt: Prompt, model: str | None) -> int: ...


class EstimateCounter:
    """Characters / chars_per_token (4 for English BPE); token-id prompts are counted exactly."""

    method = "estimate"

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.cpt = chars_per_token

    def most_tokens(self, body_bytes: int) -> int:
        """The most `count_now` can give for any prompt a /v1/completions or /v1/chat/completions body of
        `body_bytes` bytes holds: the proxy routes a body under the route threshold by this before it reads it.

        Chat counts contents / cpt plus (1 + CHAT_TOKENS_PER_MESSAGE) a message (the 1 is a ceiling's) plus
        CHAT_TOKENS_REPLY. A message takes 3 bytes at the least (`{},`); a content's characters are its JSON bytes
        for a string and its str() otherwise, at most STR_MOST times its bytes (1e15 is 1000000000000000.0), and
        a content takes 13 bytes of its message beside its own. So no more than max(STR_MOST / cpt,
        (1 + CHAT_TOKENS_PER_MESSAGE) / 3) a byte, plus the reply's. Completions count less: a string's
        characters / cpt (+1), or token ids of two bytes each at the least. tests/router/test_tokens.py holds it
        over generated and worst-case bodies."""
        per_byte = max(STR_MOST / self.cpt, (1 + CHAT_TOKENS_PER_MESSAGE) / 3)
        return math.ceil(body_bytes * per_byte) + CHAT_TOKENS_REPLY + 1

    def count_now(self, prompt: Prompt) -> int:
        if prompt.ids is not None:
            return prompt.ids
        if prompt.kind == "chat":
            return sum(math.ceil(len(m) / self.cpt) + CHAT_TOKENS_PER_MESSAGE for m in prompt.messages) \
                + CHAT_TOKENS_REPLY
        return math.ceil(len(prompt.text) / self.cpt)

    async def count(self, prompt: Prompt, model: str | None) -> int:
        return self.count_now(prompt)


class EngineCounter:
    """The engine's POST /tokenize (exact, one extra round trip); falls back to the estimate on failure."""

    method = "engine"

    def __init__(self, client: httpx.AsyncClient, pick_url: Callable[[], str | None],
                 fallback: EstimateCounter) -> None:
        self.client = client
        self.pick_url = pick_url
        self.fallback = fallback
        self.fallbacks = 0

    async def count(self, prompt: Prompt, model: str | None) -> int:
        if prompt.ids is not None:
            return prompt.ids
        url = self.pick_url()
        if url is not None:
            body: dict[str, Any] = {"messages": prompt.raw_messages} if prompt.kind == "chat" \
                else {"prompt": prompt.text}
            if model:
                body["model"] = model
            try:
                resp = await self.client.post(url + "/tokenize", json=body)
                if resp.status_code == 200:
                    return int(resp.json()["count"])
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass
        self.fallbacks += 1
        return self.fallback.count_now(prompt)


class LocalTokenizerCounter:
    """A Hugging Face tokenizer.json through the optional `tokenizers` package."""

    method = "tokenizer"

    def __init__(self, path: str) -> None:
        try:
            mod = importlib.import_module("tokenizers")
        except ImportError:
            raise ValueError("token_counter = \"tokenizer\" needs the `tokenizers` package, which is not "
                             "installed; use \"estimate\" or \"engine\"") from None
        try:
            self.tok = mod.Tokenizer.from_file(path)
        except Exception as exc:  # the library raises its own exception types
            raise ValueError(f"tokenizer_file {path!r} cannot be loaded: {exc}") from None

    def _n(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    async def count(self, prompt: Prompt, model: str | None) -> int:
        if prompt.ids is not None:
            return prompt.ids
        if prompt.kind == "chat":
            return sum(self._n(m) + CHAT_TOKENS_PER_MESSAGE for m in prompt.messages) + CHAT_TOKENS_REPLY
        return self._n(prompt.text)
