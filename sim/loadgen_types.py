"""What the load generator records: one `RequestResult` per request, the `LoadResult` of a run,
the `LoadProgress` snapshots passed to the progress callback, and `TargetError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ERROR_BODY_CHARS = 500  # the longest error text recorded for one request


class TargetError(Exception):
    """The target server cannot be reached or does not answer /v1/models usefully."""


@dataclass
class RequestResult:
    """What happened to one request; times in seconds, offsets from the run's start."""

    index: int
    long: bool
    prompt_tokens: int  # as requested
    max_tokens: int  # output tokens requested
    scheduled_s: float  # arrival offset from the workload
    sent_s: float | None = None  # when it was sent (after waiting for a concurrency slot)
    success: bool = False
    status: int | None = None  # HTTP status, None when no response arrived
    error: str = ""
    ttft_s: float | None = None
    itls_s: list[float] = field(default_factory=list)
    e2e_s: float | None = None
    output_tokens: int = 0  # from usage when present, else the number of content chunks
    usage_prompt_tokens: int | None = None
    chunks: int = 0  # content chunks received
    finish_reason: str | None = None

    @property
    def tpot_s(self) -> float:
        """(E2E - TTFT) / (output tokens - 1), 0 when output <= 1 (as vLLM's bench)."""
        if self.e2e_s is None or self.ttft_s is None or self.output_tokens <= 1:
            return 0.0
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass
class LoadResult:
    """A whole run: the settings and one `RequestResult` per request, in the order given."""

    base_url: str
    model: str | None
    api: str
    stream: bool
    max_concurrency: int | None
    duration_s: float
    results: list[RequestResult]


@dataclass(frozen=True)
class LoadProgress:
    """A snapshot passed to the `progress` callback."""

    elapsed_s: float
    total: int
    sent: int
    completed: int
    failed: int

    @property
    def in_flight(self) -> int:
        return self.sent - self.completed - self.failed
