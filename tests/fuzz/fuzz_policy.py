"""The router's policy API body (PUT /v1/policy). Contract: a Policy within its bounds, or PolicyError."""

from __future__ import annotations

from router.policy import PolicyError, load_document, parse_versioned


def fuzz_one(data: bytes) -> None:
    try:
        doc = load_document(data)
        policy = parse_versioned(doc, version=3, now=1_700_000_000.0)
    except PolicyError as exc:
        assert exc.status in (400, 409)
        return
    assert policy.route_threshold_tokens >= 1
    policy.to_dict()
