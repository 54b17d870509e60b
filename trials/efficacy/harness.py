"""The harness side of an efficacy run: engine records that tell the router when they finish, and one request as
the client saw it through the router (Outcome, with the request classes and the SLOs it is judged by)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.harness import ClientRecord
from sim.workload import RequestSpec
from trials.scenario import ScenarioHarness

LONG_CLASS_TOKENS = 5120  # request classes: short < 5120 prompt tokens <= long
TTFT_SLO_S = 2.0  # goodput and recovery SLOs (vllm bench serve semantics: both must hold), short requests
# Long prompts go to the cold path, latency second: their TTFT SLO is the cold engine's (as `doctor demo` configures
# it); a 16K-token prefill alone takes over 2 s on the default preset, so 2 s would fail them on an idle engine.
LONG_TTFT_SLO_S = 8.0
TPOT_SLO_S = 0.100


def ttft_slo_s(cls: str) -> float:
    """The TTFT SLO of a request class (`short` or `long`)."""
    return LONG_TTFT_SLO_S if cls == "long" else TTFT_SLO_S


@dataclass
class _Tracked(ClientRecord):
    """A ClientRecord that calls back once when it finishes (the router releases the slot)."""

    on_finish: Callable[[], None] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "finished" and value is not None:
            cb = getattr(self, "on_finish", None)
            if cb is not None:
                object.__setattr__(self, "on_finish", None)
                cb()


class EfficacyHarness(ScenarioHarness):
    """ScenarioHarness whose engine-side records can tell the router when they finish."""

    def submit(self, engine_name: str, spec: RequestSpec, *, at: float | None = None, ignore_eos: bool = True,
               on_finish: Callable[[], None] | None = None) -> ClientRecord:
        sent = self.start + spec.arrival_s if at is None else at
        record = _Tracked(engine_name, spec, sent, on_finish=on_finish)
        self.records.append(record)
        self._at(sent, lambda: self._arrive(record, ignore_eos))
        return record

    def kick(self, name: str) -> None:
        self._kick(self.engines[name])


@dataclass(eq=False)
class Outcome:
    """One client request as the client saw it, through the router."""

    spec: RequestSpec
    sent: float
    role: str | None = None
    upstream: str | None = None  # the router's upstream name
    engine: str | None = None  # the harness engine (process) that served it
    rejected: int | None = None  # HTTP status the router answered itself (413, 429, 503)
    record: ClientRecord | None = None
    client: str = ""  # the client id the router sees (X-Client-Id or the body's "user")
    model: str | None = None  # the body's "model"

    @property
    def cls(self) -> str:
        return "long" if self.spec.prompt_tokens >= LONG_CLASS_TOKENS else "short"

    @property
    def result(self) -> str:
        """ok | rejected (413) | failed (429/503/engine error) | unfinished."""
        if self.rejected == 413:
            return "rejected"
        if self.rejected is not None:
            return "failed"
        r = self.record
        if r is None or r.finished is None:
            return "unfinished"
        return "ok" if r.error is None else "failed"

    @property
    def ttft(self) -> float | None:
        r = self.record
        return None if r is None or r.first_token is None else r.first_token - self.sent

    @property
    def e2e(self) -> float | None:
        r = self.record
        return None if r is None or r.finished is None else r.finished - self.sent

    @property
    def tpot(self) -> float | None:
        r = self.record
        if r is None or r.first_token is None or r.finished is None or r.tokens < 2:
            return 0.0 if r is not None and r.finished is not None else None
        return (r.finished - r.first_token) / (r.tokens - 1)

    @property
    def good(self) -> bool:
        ttft, tpot = self.ttft, self.tpot
        return (self.result == "ok" and ttft is not None and ttft <= ttft_slo_s(self.cls)
                and (tpot or 0.0) <= TPOT_SLO_S)
