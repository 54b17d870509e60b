"""The router's per-request decisions, sans-IO: which path a prompt takes, and whether the emergency length limit
refuses it (with its client and model scoping). The proxy and the efficacy harness's virtual router both call these.
"""

from __future__ import annotations

from collections.abc import Callable

from router.policy import Policy


def route(policy: Policy, tokens: int) -> str:
    """`hot` for a prompt under the route threshold, else `cold`."""
    return "hot" if tokens < policy.route_threshold_tokens else "cold"


def in_limit_scope(policy: Policy, client: str, model: str | None) -> bool:
    """Is a request of `client` for `model` within the length limit's scope (no scope = every request)?"""
    return ((policy.length_limit_client is None or policy.length_limit_client == client)
            and (policy.length_limit_model is None or policy.length_limit_model == model))


def length_limit_refuses(policy: Policy, tokens: int, now: float, *, model: str | None,
                         client: Callable[[], str]) -> bool:
    """Does the emergency length limit refuse this prompt (413)? `client` is asked only for a prompt over it."""
    limit = policy.length_limit_tokens
    if limit is None or tokens <= limit or not policy.length_limit_active(now):
        return False
    return in_limit_scope(policy, client(), model)
