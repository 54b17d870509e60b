"""The router's own Prometheus metrics (its own registry; names start with router_)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from router.length_limit import LengthLimitTracker
from router.policy import ROLES, STATES, Policy
from router.upstreams import Upstream

QUEUE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
                 2.5, 5.0, 10.0, 30.0, 60.0)
# Gaps between streamed chunks: fine buckets from 1 ms (vLLM's ITL histogram starts at 10 ms).
GAP_BUCKETS = (0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03,
               0.035, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0)
REJECT_RULES = ("length_limit", "queue_full", "no_upstream", "body_too_large", "bad_request", "upstream_timeout",
                "upstream_error")


class RouterMetrics:
    """Every router_* family; label children are cached so the request path does one dict lookup."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("router_requests", "Requests answered, by endpoint, route (hot|cold|none) and "
                                "HTTP status", ("endpoint", "route", "status"), registry=r)
        self.rejections = Counter("router_rejections", "Requests refused by the router, by rule", ("rule",),
                                  registry=r)
        for rule in REJECT_RULES:
            self.rejections.labels(rule)
        self.queue_time = Histogram("router_queue_time_seconds", "Time waiting for admission, by route",
                                    ("route",), buckets=QUEUE_BUCKETS, registry=r)
        self.queue_length = Gauge("router_queue_length", "Requests waiting for admission, by route", ("route",),
                                  registry=r)
        self.in_flight = Gauge("router_in_flight", "Requests in flight per upstream", ("upstream", "role"),
                               registry=r)
        self.max_in_flight = Gauge("router_max_in_flight", "Cap on requests in flight per upstream",
                                   ("upstream", "role"), registry=r)
        self.upstream_up = Gauge("router_upstream_healthy", "1 when the upstream's /health answered 200",
                                 ("upstream", "role"), registry=r)
        self.upstream_state = Gauge("router_upstream_state", "1 for the upstream's current state",
                                    ("upstream", "role", "state"), registry=r)
        self.upstream_errors = Counter("router_upstream_errors", "Failed exchanges with an upstream, by kind",
                                       ("upstream", "kind"), registry=r)
        self.checked = Counter("router_prompt_tokens_checked", "Responses whose engine-reported prompt_tokens "
                               "was compared with the router's count", registry=r)
        self.misrouted = Counter("router_misrouted", "Prompts whose engine-reported token count falls on the "
                                 "other side of the route threshold than the router's count said", ("direction",),
                                 registry=r)
        for d in ("short_as_long", "long_as_short"):
            self.misrouted.labels(d)
        self.gap = Histogram("router_stream_chunk_gap_seconds", "Gaps between streamed token chunks per engine",
                             ("upstream", "role"), buckets=GAP_BUCKETS, registry=r)
        self.gap_sq = Counter("router_stream_chunk_gap_squared_seconds", "Sum of squared chunk gaps (for the "
                              "exact coefficient of variation)", ("upstream", "role"), registry=r)
        self.policy_version = Gauge("router_policy_version", "Version of the policy in force", registry=r)
        self.token_method = Gauge("router_token_count_method", "1 for the prompt token counting method in use",
                                  ("method",), registry=r)
        self.token_fallbacks = Gauge("router_token_count_fallbacks", "Counts that fell back to the estimate",
                                     registry=r)
        self.length_limit = Gauge("router_length_limit_tokens", "Emergency length limit in force (0 = none)",
                                  registry=r)
        self.length_limit_idle = Gauge(
            "router_length_limit_idle_seconds", "Seconds since the emergency length limit last refused a request, "
            "or since it was set when it has refused none (0 = no limit in force)", registry=r)
        self.threshold = Gauge("router_route_threshold_tokens", "Route threshold in tokens", registry=r)
        self._children: dict[tuple[object, ...], MetricWrapperBase] = {}

    def child(self, metric: MetricWrapperBase, *labels: str) -> MetricWrapperBase:
        key = (id(metric), *labels)
        c = self._children.get(key)
        if c is None:
            c = self._children[key] = metric.labels(*labels)
        return c

    def request(self, endpoint: str, route: str, status: int) -> None:
        self.child(self.requests, endpoint, route, str(status)).inc()  # type: ignore[attr-defined]

    def reject(self, rule: str) -> None:
        self.child(self.rejections, rule).inc()  # type: ignore[attr-defined]

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def refresh(self, *, policy: Policy, version: int, queue_length: Callable[[str], int],
                upstreams: Iterable[Upstream], length_limit: LengthLimitTracker, now: float) -> None:
        """The gauges as of `now` (before each scrape): queues, upstreams (detached ones included), the policy
        version, the route threshold and the length limit with its idle time. The router and the trials'
        virtual router both call this."""
        for r in ROLES:
            self.queue_length.labels(r).set(queue_length(r))
        for u in upstreams:
            self.in_flight.labels(u.name, u.role).set(u.in_flight)
            self.max_in_flight.labels(u.name, u.role).set(u.max_in_flight)
            self.upstream_up.labels(u.name, u.role).set(1 if u.healthy else 0)
            for s in STATES:
                self.upstream_state.labels(u.name, u.role, s).set(1 if u.state == s and not u.detached else 0)
        self.policy_version.set(version)
        self.threshold.set(policy.route_threshold_tokens)
        active = policy.length_limit_active(now)
        self.length_limit.set((policy.length_limit_tokens or 0) if active else 0)
        self.length_limit_idle.set(length_limit.idle_s(policy, now) or 0.0)
