"""EstimateCounter.most_tokens bounds what count_now gives for any prompt a body of that many bytes holds: the proxy
routes a short body hot before reading it (router/proxy.py), so a body the bound lets through must never count at
or over the route threshold."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.tokens import BadPrompt, EstimateCounter, extract

CPTS = [0.25, 0.5, 1.0, 2.5, 4.0, 8.0]

# Any JSON value, with the numbers whose str() is longest beside their JSON (1e15 is 1000000000000000.0).
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.sampled_from([1e15, 9e15, -1e15, 1e-4]),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                               max_size=3),
                       max_leaves=12)
_content = st.one_of(st.text(max_size=40), _values,
                     st.lists(st.fixed_dictionaries({}, optional={"type": st.just("text"), "text": _values}),
                              max_size=4))
_chat = st.fixed_dictionaries({"messages": st.lists(st.fixed_dictionaries(
    {}, optional={"role": st.sampled_from(["user", "system"]), "content": _content}), min_size=1, max_size=8)})
_completion = st.fixed_dictionaries({"prompt": st.one_of(
    st.text(max_size=60), st.lists(st.text(max_size=20), min_size=1, max_size=5),
    st.lists(st.integers(0, 100_000), min_size=1, max_size=40),
    st.lists(st.lists(_scalars, max_size=10), min_size=1, max_size=4))})


def _counted(kind: str, doc: dict[str, Any], body: bytes, cpt: float) -> None:
    counter = EstimateCounter(cpt)
    try:
        prompt = extract(kind, json.loads(body))
    except BadPrompt:
        return
    assert counter.count_now(prompt) <= counter.most_tokens(len(body)), (body, cpt)


@settings(max_examples=300, deadline=None)
@given(doc=_chat, cpt=st.sampled_from(CPTS), ascii_only=st.booleans(), compact=st.booleans())
def test_no_chat_body_counts_more_than_its_bound(doc: dict[str, Any], cpt: float, ascii_only: bool,
                                                 compact: bool) -> None:
    body = json.dumps(doc, ensure_ascii=ascii_only, separators=(",", ":") if compact else None).encode()
    _counted("chat", doc, body, cpt)


@settings(max_examples=300, deadline=None)
@given(doc=_completion, cpt=st.sampled_from(CPTS), ascii_only=st.booleans(), compact=st.booleans())
def test_no_completions_body_counts_more_than_its_bound(doc: dict[str, Any], cpt: float, ascii_only: bool,
                                                        compact: bool) -> None:
    body = json.dumps(doc, ensure_ascii=ascii_only, separators=(",", ":") if compact else None).encode()
    _counted("completions", doc, body, cpt)


@pytest.mark.parametrize("cpt", CPTS)
@pytest.mark.parametrize("body", [
    b'{"messages":[{},{},{},{},{},{},{},{},{},{}]}',  # as many messages as the bytes allow
    b'{"messages":[{"content":1e15},{"content":1e15},{"content":9e15}]}',  # the longest str() of a number
    b'{"messages":[{"content":[{"text":1e15},{},{"text":1e15}]}]}',
    b'{"prompt":[1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0]}',  # as many token ids as the bytes allow
    b'{"prompt":[[1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9]]}',
    '{"prompt":"\U0001f600\u00e9\u4e2d"}'.encode(),  # characters of several bytes
])
def test_the_worst_bodies_stay_within_the_bound(body: bytes, cpt: float) -> None:
    kind = "chat" if body.startswith(b'{"messages"') else "completions"
    _counted(kind, json.loads(body), body, cpt)
