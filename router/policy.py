"""The policy document the doctor reads and writes through the policy API, and its validation.

Shape (GET /router/policy returns it with `version`, `updated_at` and a read-only `status`; PUT takes the
whole document; `version`, when given, must match the current one):

    {"route_threshold_tokens": 5120,
     "length_limit_tokens": null, "length_limit_expires_at": null,
     "length_limit_client": null, "length_limit_model": null,
     "batch_timeout_ms": 0, "fairness_window": 10, "max_queue": 1024,
     "upstreams": {"hot": [{"name": "hot", "url": "http://h:8000", "state": "active", "max_in_flight": 256}],
                   "cold": [...]}}
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

ROLES: tuple[str, str] = ("hot", "cold")
STATES = ("active", "draining", "stopped")
BATCH_TIMEOUT_MAX_MS = 1000
FAIRNESS_MAX = 10_000
QUEUE_MAX = 100_000
IN_FLIGHT_MAX = 100_000
TOKENS_MAX = 10_000_000
READ_ONLY_KEYS = ("version", "updated_at", "status")


class PolicyError(ValueError):
    """A policy document that is refused (HTTP 400, or 409 for a version conflict)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def load_document(raw: bytes) -> Any:
    """A PUT body as JSON, or PolicyError (400) naming what is wrong (nesting too deep included)."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PolicyError(f"invalid JSON: {'nested too deeply' if isinstance(exc, RecursionError) else exc}") from None


@dataclass(frozen=True)
class UpstreamSpec:
    name: str
    url: str
    state: str = "active"
    max_in_flight: int = 256

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "state": self.state, "max_in_flight": self.max_in_flight}


@dataclass(frozen=True)
class Policy:
    route_threshold_tokens: int = 5120
    length_limit_tokens: int | None = None
    length_limit_expires_at: float | None = None  # unix seconds; None = no expiry
    length_limit_client: str | None = None  # only this client (X-Client-Id header or the body's "user")
    length_limit_model: str | None = None  # only this model
    batch_timeout_ms: int = 0
    fairness_window: int = 10
    max_queue: int = 1024
    upstreams: Mapping[str, tuple[UpstreamSpec, ...]] = field(default_factory=lambda: {"hot": (), "cold": ()})

    def to_dict(self) -> dict[str, Any]:
        return {
            "route_threshold_tokens": self.route_threshold_tokens,
            "length_limit_tokens": self.length_limit_tokens,
            "length_limit_expires_at": self.length_limit_expires_at,
            "length_limit_client": self.length_limit_client,
            "length_limit_model": self.length_limit_model,
            "batch_timeout_ms": self.batch_timeout_ms,
            "fairness_window": self.fairness_window,
            "max_queue": self.max_queue,
            "upstreams": {role: [u.to_dict() for u in self.upstreams.get(role, ())] for role in ROLES},
        }

    def length_limit_active(self, now: float) -> bool:
        if self.length_limit_tokens is None:
            return False
        return self.length_limit_expires_at is None or now < self.length_limit_expires_at

    def length_limit_rule(self) -> tuple[int | None, str | None, str | None]:
        """What the emergency length limit refuses (its expiry aside: a longer expiry is the same limit)."""
        return (self.length_limit_tokens, self.length_limit_client, self.length_limit_model)

    def all_upstreams(self) -> list[tuple[str, UpstreamSpec]]:
        return [(role, u) for role in ROLES for u in self.upstreams.get(role, ())]


def initial_policy(hot: list[str], cold: list[str], *, route_threshold_tokens: int = 5120, batch_timeout_ms: int = 0,
                   fairness_window: int = 10, max_queue: int = 1024, max_in_flight: int = 256) -> Policy:
    """The policy a router starts with when it has no policy file: upstreams named hot, hot-2, cold ..."""
    def specs(role: str, urls: list[str]) -> tuple[UpstreamSpec, ...]:
        return tuple(UpstreamSpec(role if i == 0 else f"{role}-{i + 1}", u.rstrip("/"), "active", max_in_flight)
                     for i, u in enumerate(urls))

    return Policy(route_threshold_tokens=route_threshold_tokens, batch_timeout_ms=batch_timeout_ms,
                  fairness_window=fairness_window, max_queue=max_queue,
                  upstreams={"hot": specs("hot", hot), "cold": specs("cold", cold)})


def _int(doc: Mapping[str, Any], key: str, lo: int, hi: int, default: int | None) -> int | None:
    value = doc.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{key}: expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise PolicyError(f"{key}: {value} is out of bounds ({lo}..{hi})")
    return value


def _time(value: Any, now: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise PolicyError(f"length_limit_expires_at: expected unix seconds or an ISO 8601 time, got {value!r}")
    if isinstance(value, int | float):
        when = float(value)
    elif isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise PolicyError(f"length_limit_expires_at: {value!r} is not an ISO 8601 time") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        when = parsed.timestamp()
    else:
        raise PolicyError(f"length_limit_expires_at: expected unix seconds or an ISO 8601 time, got {value!r}")
    return when


def _opt_str(doc: Mapping[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise PolicyError(f"{key}: expected a string or null, got {value!r}")
    return value


def _dialable(url: str) -> bool:
    """Whether the router can dial the URL: it splits (no unbalanced [ ]), has a host, and a port if any is valid."""
    try:
        parts = urlsplit(url)
        return bool(parts.hostname) and parts.port != 0
    except ValueError:  # "Invalid IPv6 URL", "Port could not be cast", "Port out of range"
        return False


def _upstreams(doc: Mapping[str, Any], default_mif: int) -> dict[str, tuple[UpstreamSpec, ...]]:
    raw = doc.get("upstreams")
    if not isinstance(raw, dict):
        raise PolicyError('upstreams: expected {"hot": [...], "cold": [...]}')
    for role in raw:
        if role not in ROLES:
            raise PolicyError(f"upstreams: unknown role {role!r}; roles are hot and cold")
    out: dict[str, tuple[UpstreamSpec, ...]] = {}
    names: set[str] = set()
    for role in ROLES:
        items = raw.get(role, [])
        if not isinstance(items, list):
            raise PolicyError(f"upstreams.{role}: expected a list")
        specs: list[UpstreamSpec] = []
        for i, item in enumerate(items):
            where = f"upstreams.{role}[{i}]"
            if isinstance(item, str):
                item = {"url": item}
            if not isinstance(item, dict):
                raise PolicyError(f"{where}: expected an object with url, name, state, max_in_flight")
            extra = set(item) - {"name", "url", "state", "max_in_flight"}
            if extra:
                raise PolicyError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
            url = item.get("url")
            if not isinstance(url, str) or not url.startswith(("http://", "https://")) or not _dialable(url):
                raise PolicyError(f"{where}.url: expected an http:// or https:// URL with a host (and a port "
                                  f"1..65535 if any), got {url!r}")
            name = item.get("name", role if i == 0 else f"{role}-{i + 1}")
            if not isinstance(name, str) or not name or len(name) > 100:
                raise PolicyError(f"{where}.name: expected a non-empty string, got {name!r}")
            if name in names:
                raise PolicyError(f"{where}.name: {name!r} is used twice; upstream names must be unique")
            names.add(name)
            state = item.get("state", "active")
            if state not in STATES:
                raise PolicyError(f"{where}.state: {state!r} is not one of {', '.join(STATES)}")
            mif = _int(item, "max_in_flight", 1, IN_FLIGHT_MAX, default_mif)
            assert mif is not None
            specs.append(UpstreamSpec(name, url.rstrip("/"), state, mif))
        out[role] = tuple(specs)
    return out


_KEYS = {"route_threshold_tokens", "length_limit_tokens", "length_limit_expires_at", "length_limit_client",
         "length_limit_model", "batch_timeout_ms", "fairness_window", "max_queue", "max_in_flight", "upstreams",
         *READ_ONLY_KEYS}


def parse_policy(doc: Any, *, now: float, default_max_in_flight: int = 256) -> Policy:
    """Validate a whole policy document (bounds that need engines' max_model_len: check_limits)."""
    if not isinstance(doc, dict):
        raise PolicyError("the policy must be a JSON object")
    unknown = set(doc) - _KEYS
    if unknown:
        raise PolicyError(f"unknown key(s): {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_KEYS))}")
    mif = _int(doc, "max_in_flight", 1, IN_FLIGHT_MAX, default_max_in_flight)
    assert mif is not None
    threshold = _int(doc, "route_threshold_tokens", 1, TOKENS_MAX, None)
    if threshold is None:
        raise PolicyError("route_threshold_tokens: required")
    limit = _int(doc, "length_limit_tokens", 1, TOKENS_MAX, None)
    expires = _time(doc.get("length_limit_expires_at"), now)
    if expires is not None and limit is None:
        raise PolicyError("length_limit_expires_at: given without length_limit_tokens")
    policy = Policy(
        route_threshold_tokens=threshold,
        length_limit_tokens=limit,
        length_limit_expires_at=expires,
        length_limit_client=_opt_str(doc, "length_limit_client"),
        length_limit_model=_opt_str(doc, "length_limit_model"),
        batch_timeout_ms=_int(doc, "batch_timeout_ms", 0, BATCH_TIMEOUT_MAX_MS, 0) or 0,
        fairness_window=_int(doc, "fairness_window", 0, FAIRNESS_MAX, 10) or 0,
        max_queue=_int(doc, "max_queue", 0, QUEUE_MAX, 1024) or 0,
        upstreams=_upstreams(doc, mif),
    )
    return policy


def parse_versioned(doc: Any, *, version: int, now: float, default_max_in_flight: int = 256) -> Policy:
    """parse_policy for a PUT: a `version` given must be the current one (409 otherwise)."""
    new = parse_policy(doc, now=now, default_max_in_flight=default_max_in_flight)
    if isinstance(doc, dict) and doc.get("version") is not None and doc["version"] != version:
        raise PolicyError(f"version {doc['version']} is not the current version {version} "
                          "(GET the policy again and re-apply the change)", 409)
    return new


def check_limits(policy: Policy, max_model_len: Mapping[str, int | None], *, now: float,
                 previous: Policy | None = None) -> None:
    """Thresholds within the engines' max_model_len (per upstream name; unknown lengths are not checked).

    route_threshold_tokens <= every hot engine's max_model_len (hot must take anything below it);
    length_limit_tokens <= the largest max_model_len of any engine; a new expiry must be in the future
    (an unchanged, already passed one is kept: it is simply inactive).
    """
    hot = [max_model_len.get(u.name) for u in policy.upstreams.get("hot", ())]
    hot_known = [m for m in hot if m]
    if hot_known and policy.route_threshold_tokens > min(hot_known):
        raise PolicyError(f"route_threshold_tokens: {policy.route_threshold_tokens} is above the hot engine's "
                          f"max_model_len ({min(hot_known)})")
    every = [m for _, u in policy.all_upstreams() if (m := max_model_len.get(u.name))]
    if policy.length_limit_tokens is not None and every and policy.length_limit_tokens > max(every):
        raise PolicyError(f"length_limit_tokens: {policy.length_limit_tokens} is above every engine's "
                          f"max_model_len (largest {max(every)})")
    expires = policy.length_limit_expires_at
    unchanged = previous is not None and previous.length_limit_expires_at == expires
    if expires is not None and expires <= now and not unchanged:
        raise PolicyError(f"length_limit_expires_at: {expires:.3f} is already past (now {now:.3f})")


def diff(old: Policy, new: Policy) -> list[str]:
    """Human-readable changes, one per field or upstream."""
    out: list[str] = []
    a, b = old.to_dict(), new.to_dict()
    for field_name in a:
        if field_name != "upstreams" and a[field_name] != b[field_name]:
            out.append(f"{field_name}: {a[field_name]} -> {b[field_name]}")
    before = {(r, u.name): u for r, u in old.all_upstreams()}
    after = {(r, u.name): u for r, u in new.all_upstreams()}
    for key, u in after.items():
        prev = before.get(key)
        if prev is None:
            out.append(f"upstream {key[1]} ({key[0]}) added: {u.url} {u.state} max_in_flight={u.max_in_flight}")
        elif prev != u:
            changes = [f"{f}: {getattr(prev, f)} -> {getattr(u, f)}" for f in ("url", "state", "max_in_flight")
                       if getattr(prev, f) != getattr(u, f)]
            out.append(f"upstream {key[1]} ({key[0]}) " + ", ".join(changes))
    for key in before:
        if key not in after:
            out.append(f"upstream {key[1]} ({key[0]}) removed")
    return out


def with_upstream_state(policy: Policy, name: str, state: str) -> Policy:
    """A copy with one upstream's state changed (helper for callers and tests)."""
    ups = {role: tuple(replace(u, state=state) if u.name == name else u for u in specs)
           for role, specs in policy.upstreams.items()}
    return replace(policy, upstreams=ups)
