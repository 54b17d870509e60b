"""What one efficacy run leaves: every request's outcome and the doctor's evaluations and actions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from playbooks.model import Finding
from sim.scenarios import Scenario
from trials.efficacy.harness import Outcome


@dataclass
class Evaluation:
    t_s: float
    findings: list[Finding]


@dataclass
class RunResult:
    """One run: every request's outcome, the doctor's evaluations and actions (times relative to t0)."""

    scenario: Scenario
    seed: int
    mode: str
    t0: float
    end_s: float
    outcomes: list[Outcome]
    evaluations: list[Evaluation]
    actions: list[dict[str, Any]] = field(default_factory=list)
    policy_changes: list[tuple[float, str]] = field(default_factory=list)
    probe: list[Outcome] = field(default_factory=list)  # the capacity probe's requests (none unless asked)
    probe_rates: tuple[float, float] = (0.0, 0.0)  # its arrival rate at the start and at the end, req/s
    usage: dict[str, Any] = field(default_factory=dict)  # over the incident window: gpu_s, util per engine process
