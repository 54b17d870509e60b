"""The playbook unit and what it sees: one engine's signals, its history, its peers, thresholds.

A playbook is a small class: an id, a title, the signals and Prometheus alert names it reacts to,
thresholds as named parameters (seed defaults, overridable per engine in the config), a `for`
duration, `check(view)` that returns a Condition (or None) and `remedies(view, condition)`.
Hysteresis is applied by `EngineView.above/below`: while a finding is active its thresholds are
relaxed by `hysteresis` so a value hovering at the edge does not flap.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from collectors.types import EngineConfigView, Event, Signals
from playbooks.model import Action, Evidence, Severity


def round_threshold(tokens: float, floor: int = 1024) -> int:
    """A route threshold rounded down to a multiple of 512 tokens, never below `floor`."""
    return max(floor, int(tokens) // 512 * 512)


class HistoryView(Protocol):
    """Past values of one engine's signals (the state directory's history, or Prometheus)."""

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]: ...

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None: ...


class NoHistory:
    """For one-shot runs without a state directory."""

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return []

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        return None


@dataclass
class EngineView:
    """What a playbook sees of one engine during one evaluation."""

    name: str
    role: str | None
    signals: Signals
    params: Mapping[str, float]  # this playbook's thresholds, defaults merged with config overrides
    now: float
    config: EngineConfigView = field(default_factory=EngineConfigView)
    history: HistoryView = field(default_factory=NoHistory)
    peers: Sequence[EngineView] = ()
    active: bool = False  # the playbook's finding is currently active on this engine (hysteresis)
    hysteresis: float = 0.1
    templates_configured: bool = False
    slo: Mapping[str, float] = field(default_factory=dict)  # e.g. p99_ttft_s, p99_e2e_s
    change_in_progress: bool = False  # the doctor itself is acting on this engine
    show_weak: bool = False  # see signals built from too few requests (only to report a pending condition)
    # What this evaluation's playbooks worked out for many engines at once (a pool's members and verdict), shared
    # by every view of one evaluation (doctor.pipeline.build_views): judged once per pool, not once per replica.
    memo: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

    @property
    def window_s(self) -> float:
        return self.signals.window_s

    def value(self, signal: str) -> float | None:
        """The signal's value; None when unknown, or built from too few requests to judge."""
        v = self.signals.get(signal)
        if v is None or (not self.show_weak and self.signals.is_weak(signal)):
            return None
        return float(v)

    def pick(self, *signals: str) -> str:
        """The first of `signals` with a value (e.g. a gauge over the window, else its newest read)."""
        return next((s for s in signals if self.value(s) is not None), signals[0])

    def cap_binds(self) -> bool:
        """Running held at the known sequence cap in every read of the window while requests waited."""
        cap, low, waiting = self.value("seq_cap"), self.value("running_min"), self.value("waiting_min")
        return cap is not None and low is not None and waiting is not None and low >= cap and waiting >= 1

    @property
    def events(self) -> tuple[Event, ...]:
        return self.signals.events

    def events_of(self, *kinds: str) -> list[Event]:
        return [e for e in self.signals.events if e.kind in kinds]

    def above(self, signal: str, param: str) -> Evidence | None:
        """Evidence when `signal` > the threshold `param` (relaxed downwards while active)."""
        value = self.value(signal)
        threshold = self.params[param]
        if value is None:
            return None
        limit = threshold * (1 - self.hysteresis) if self.active else threshold
        if value > limit:
            return Evidence(signal, value, threshold, self.window_s, ">")
        return None

    def below(self, signal: str, param: str) -> Evidence | None:
        """Evidence when `signal` < the threshold `param` (relaxed upwards while active)."""
        value = self.value(signal)
        threshold = self.params[param]
        if value is None:
            return None
        limit = threshold * (1 + self.hysteresis) if self.active else threshold
        if value < limit:
            return Evidence(signal, value, threshold, self.window_s, "<")
        return None


@dataclass(frozen=True)
class Condition:
    """A playbook's verdict for one evaluation: evidence, how many independent signals agree, a summary."""

    summary: str
    evidence: tuple[Evidence, ...]
    agreeing: int = 1
    considered: int = 1
    severity: Severity | None = None  # overrides the playbook's default severity
    details: Mapping[str, float | str] = field(default_factory=dict)


class Playbook(ABC):
    """One coded runbook."""

    id: ClassVar[str]
    title: ClassVar[str]
    severity: ClassVar[Severity] = "warning"
    signals: ClassVar[tuple[str, ...]] = ()
    alerts: ClassVar[tuple[str, ...]] = ()  # Prometheus alert names that map to this playbook
    defaults: ClassVar[dict[str, float]] = {}
    for_s: ClassVar[float] = 0.0  # how long the condition must hold before a finding is reported
    roles: ClassVar[tuple[str, ...] | None] = None  # engine roles it applies to (None: all)
    runbook: ClassVar[str] = ""  # markdown: what it means, how to confirm by hand, what the remedies do

    @abstractmethod
    def check(self, view: EngineView) -> Condition | None:
        """The condition and its evidence, or None when it does not hold."""

    @abstractmethod
    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        """Remedies in order of preference."""

    def applies_to(self, view: EngineView) -> bool:
        return self.roles is None or view.role is None or view.role in self.roles

    @classmethod
    def runbook_anchor(cls) -> str:
        return f"docs/runbooks.md#{cls.id.replace('_', '-')}"
