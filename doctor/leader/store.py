"""The lease store interface the elector talks to, the grant it hands out, and the room's errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class LeaseError(Exception):
    """The store could not be asked (unreachable, refused, an answer not understood): try again later."""


class LeaseLost(LeaseError):
    """The store says the lease is no longer ours (expired, revoked, or taken over)."""


@dataclass(frozen=True)
class Grant:
    """A lease held: `token` is the fencing token (grows with every new holder), `handle` the store's own id."""

    holder: str
    token: int
    lease_s: float  # the duration the store granted (the elector acts on the shorter of this and its own)
    handle: str = ""


@dataclass(frozen=True)
class Holder:
    """Who the store says holds the lease now (None: nobody)."""

    identity: str | None
    token: int | None = None


class LeaseStore(Protocol):
    """acquire / renew / release a named lease for a holder id; the elector measures time, the store does not."""

    name: str  # "etcd" | "kubernetes", for the state and the audit

    async def try_acquire(self, holder: str, lease_s: float) -> Grant | None:
        """Take the lease when nobody holds it (None: somebody does); raises LeaseError when it cannot ask."""
        ...

    async def renew(self, grant: Grant) -> Grant:
        """Extend the lease by its duration from now; LeaseLost when it is not ours any more."""
        ...

    async def release(self, grant: Grant) -> None:
        """Give the lease up now (the other replica need not wait it out)."""
        ...

    async def holder(self) -> Holder:
        """Who holds it, as far as the store knows."""
        ...

    async def aclose(self) -> None:
        ...
