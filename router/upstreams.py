"""The router's upstreams, sans-IO: one engine as the router sees it, the pools that follow the policy, the pick.

The real router (router/app.py) and the efficacy harness's virtual router both keep their upstreams here;
only who sets `healthy` and `max_model_len` differs (health probes, or the simulated engine's state).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from router.policy import ROLES, Policy

UpstreamKey = tuple[str, str, str]  # role, name, url


class Upstream:
    """One engine behind the router, as the router sees it."""

    __slots__ = ("detached", "healthy", "in_flight", "last_error", "max_in_flight", "max_model_len", "name",
                 "role", "state", "url")

    def __init__(self, name: str, url: str, role: str, state: str = "active", max_in_flight: int = 256) -> None:
        self.name = name
        self.url = url
        self.role = role
        self.state = state
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.healthy = False
        self.max_model_len: int | None = None
        self.last_error: str | None = None
        self.detached = False  # removed from the policy; its in-flight requests still finish

    def eligible(self) -> bool:
        return self.state == "active" and self.healthy and not self.detached

    def status(self) -> dict[str, object]:
        return {"url": self.url, "role": self.role, "state": self.state, "healthy": self.healthy,
                "in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
                "max_model_len": self.max_model_len, "last_error": self.last_error}


def other(role: str) -> str:
    return "cold" if role == "hot" else "hot"


def pick(ups: Iterable[Upstream]) -> Upstream | None:
    """The upstream with the most free in-flight slots (the first of equals); None when none has a free slot."""
    best: Upstream | None = None
    room = 0
    for u in ups:
        free = u.max_in_flight - u.in_flight
        if free > room:
            best, room = u, free
    return best


def fits(pool: Sequence[Upstream], tokens: int) -> bool:
    """Can an eligible upstream of `pool` take a prompt of `tokens` (an unknown max_model_len takes anything)?"""
    return any(u.eligible() and (u.max_model_len is None or tokens < u.max_model_len) for u in pool)


class UpstreamSet:
    """The upstreams per role, kept in step with the policy (`sync`); removed ones are detached, not dropped."""

    def __init__(self) -> None:
        self.pools: dict[str, list[Upstream]] = {r: [] for r in ROLES}
        self.known: dict[UpstreamKey, Upstream] = {}
        self.detached: list[Upstream] = []  # removed, with requests still in flight

    def sync(self, policy: Policy, prepared: Mapping[UpstreamKey, Upstream] | None = None) -> list[Upstream]:
        """Follow `policy` (`prepared`: new upstreams already probed); returns the upstreams it added."""
        seen: set[UpstreamKey] = set()
        added: list[Upstream] = []
        for role in ROLES:
            pool: list[Upstream] = []
            for spec in policy.upstreams.get(role, ()):
                key = (role, spec.name, spec.url)
                u = self.known.get(key) or (prepared or {}).get(key)
                if u is None:
                    u = Upstream(spec.name, spec.url, role)
                if key not in self.known:
                    added.append(u)
                u.state, u.max_in_flight, u.detached = spec.state, spec.max_in_flight, False
                self.known[key] = u
                seen.add(key)
                pool.append(u)
            self.pools[role][:] = pool
        for key in [k for k in self.known if k not in seen]:
            u = self.known.pop(key)
            u.detached = True
            if u.in_flight:
                self.detached.append(u)
        self.detached = [u for u in self.detached if u.in_flight > 0]
        return added

    def all(self) -> list[Upstream]:
        """Every upstream of the policy, hot first."""
        return [u for r in ROLES for u in self.pools[r]]

    def named(self, name: str) -> Upstream | None:
        return next((u for u in self.all() if u.name == name), None)
