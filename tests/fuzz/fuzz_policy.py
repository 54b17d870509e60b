"""The router's policy API body (PUT /v1/policy). Contract: a Policy within its bounds, or PolicyError."""

from __future__ import annotations

from urllib.parse import urlsplit

from router.policy import PolicyError, load_document, parse_versioned


def fuzz_one(data: bytes) -> None:
    try:
        doc = load_document(data)
        policy = parse_versioned(doc, version=3, now=1_700_000_000.0)
    except PolicyError as exc:
        assert exc.status in (400, 409)
        return
    assert policy.route_threshold_tokens >= 1
    for _, upstream in policy.all_upstreams():  # the router dials these: each must split into host and port
        parts = urlsplit(upstream.url)
        assert parts.hostname, upstream.url
        assert parts.port is None or parts.port > 0, upstream.url
    policy.to_dict()
