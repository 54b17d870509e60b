"""The bookkeeping behind `router_length_limit_idle_seconds`: when the limit in force was set and when it last
refused a request. One tracker, used by the router and by the efficacy harness's virtual router."""

from __future__ import annotations

from collections import deque

from router.policy import Policy

RECENT_KEEP = 1024  # refusal times kept (a count over a window saturates here; the lift asks about a handful)


class LengthLimitTracker:
    """Idle seconds of the length limit in force, and its recent refusals."""

    def __init__(self, now: float) -> None:
        self.since = now  # when the limit in force was set
        self.last_refusal: float | None = None
        self.refusals_total = 0
        self._recent: deque[float] = deque(maxlen=RECENT_KEEP)

    def policy_changed(self, old: Policy, new: Policy, now: float) -> None:
        """A new limit (tokens or scope; a longer expiry is the same limit) starts idle from now."""
        if new.length_limit_rule() != old.length_limit_rule():
            self.since, self.last_refusal = now, None

    def refused(self, now: float) -> None:
        self.last_refusal = now
        self.refusals_total += 1
        self._recent.append(now)

    def idle_s(self, policy: Policy, now: float) -> float | None:
        """Seconds since the limit in force was set or last refused a request; None when no limit is active."""
        if policy.length_limit_tokens is None or not policy.length_limit_active(now):
            return None
        return max(0.0, now - max(self.since, self.last_refusal or self.since))

    def refusals_since(self, t: float) -> int:
        """Refusals after time `t` (at most RECENT_KEEP)."""
        return sum(1 for x in self._recent if x > t)
