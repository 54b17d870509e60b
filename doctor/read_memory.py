"""What a long-lived caller (the daemon) remembers of its last cycles' reads, so that a cycle reads each engine
once instead of twice `sample_s` apart.

A one-shot `doctor diagnose` reads every engine twice: the rates need two points. The daemon reads every few
seconds, and its previous cycle's read is already kept in the snapshot store: when every engine's newest kept
snapshot is at most `fresh_s` old, the cycle reads once and the window opens on the kept ones. What the store
does not keep is remembered here: the router's previous snapshot (its rates), each engine's identity
(/version, /v1/models, /server_info), asked again after `identity_ttl_s` or when /health or /metrics failed, and
its last 200 from /health, asked again after `health_every_s` (5 s) or at once when /metrics fails. Measured: the
daemon's cycle at a 1 s interval went from 14 requests and 4 scrapes to 2 (and a /health every 5 s) and 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collectors.types import Sample

IDENTITY_SOURCES = ("version", "models", "server_info")


@dataclass
class ReadMemory:
    """The reads a cycle may reuse; `fresh_s`: how old the previous read may be for a cycle to read once."""

    fresh_s: float
    identity_ttl_s: float = 60.0
    health_every_s: float = 5.0  # /health is asked at least this often while it answers 200 (at once on a failure)
    health: dict[str, Sample] = field(default_factory=dict)  # engine -> its last /health answer
    router: dict[str, Sample] = field(default_factory=dict)  # router URL -> its last snapshot
    identity: dict[str, tuple[float, list[Sample]]] = field(default_factory=dict)  # engine -> (read at, samples)

    def identity_for(self, engine: str, now: float) -> list[Sample] | None:
        """The engine's remembered identity samples, or None when they are to be read again."""
        kept = self.identity.get(engine)
        if kept is None or now - kept[0] > self.identity_ttl_s:
            return None
        return kept[1]

    def health_for(self, engine: str, now: float) -> tuple[Sample, ...] | None:
        """The engine's last /health answer when it was 200 and at most `health_every_s` old (None: ask again)."""
        kept = self.health.get(engine)
        if kept is None or kept.error is not None or kept.data.get("status") != 200:
            return None
        return (kept,) if now - kept.timestamp < self.health_every_s else None

    def remember(self, engine: str, samples: list[Sample], started: float) -> None:
        """Keep the identity samples read since `started` (not the remembered ones a cycle reused; a failed one
        too, asked again after the TTL); forget them when the engine's /health or /metrics read failed (it may
        come back restarted, with another version or model)."""
        fresh_health = [s for s in samples if s.source == "health" and s.timestamp >= started]
        if fresh_health:
            self.health[engine] = fresh_health[-1]
        if any(s.error for s in samples if s.source in ("health", "metrics")):
            self.identity.pop(engine, None)
            self.health.pop(engine, None)
            return
        ident = [s for s in samples if s.source in IDENTITY_SOURCES and s.timestamp >= started]
        if ident:
            self.identity[engine] = (started, ident)

    def router_before(self, url: str, now: float) -> Sample | None:
        """The router's previous snapshot when at most `fresh_s` old."""
        kept = self.router.get(url)
        return kept if kept is not None and kept.error is None and now - kept.timestamp <= self.fresh_s else None
