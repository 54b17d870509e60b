"""What an accuracy run found: the findings and signals of each evaluation, and what they add up to
(detection, its delay and first remedy, false positives)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collectors.types import Signals
from playbooks.model import Finding
from sim.scenarios import Scenario


@dataclass(frozen=True)
class FalsePositive:
    t_s: float
    playbook: str
    engine: str
    severity: str
    summary: str


@dataclass
class Evaluation:
    """One diagnose run during the scenario (t_s: seconds since the scenario started)."""

    t_s: float
    findings: list[Finding]
    signals: dict[str, Signals]


@dataclass
class ScenarioResult:
    scenario: Scenario
    seed: int
    evaluations: list[Evaluation]
    missing_playbooks: list[str]
    wall_s: float = 0.0

    @property
    def onset_s(self) -> float | None:
        return self.scenario.onset_s

    def _expected(self, f: Finding) -> bool:
        sc = self.scenario
        return f.playbook == sc.expected_playbook and (sc.expected_engine is None or f.engine == sc.expected_engine)

    @property
    def detection(self) -> tuple[float, Finding] | None:
        """The first evaluation at or after onset where the expected playbook fired."""
        sc = self.scenario
        if sc.expected_playbook is None or sc.onset_s is None:
            return None
        for ev in self.evaluations:
            if ev.t_s < sc.onset_s:
                continue
            for f in ev.findings:
                if self._expected(f):
                    return ev.t_s, f
        return None

    @property
    def detected_at_s(self) -> float | None:
        d = self.detection
        return None if d is None else d[0]

    @property
    def detection_delay_s(self) -> float | None:
        d = self.detection
        return None if d is None or self.scenario.onset_s is None else d[0] - self.scenario.onset_s

    @property
    def first_remedies(self) -> tuple[str, ...]:
        d = self.detection
        return () if d is None else tuple(a.kind for a in d[1].remedies)

    @property
    def first_remedy(self) -> str | None:
        kinds = self.first_remedies
        return kinds[0] if kinds else None

    @property
    def fired(self) -> dict[str, float]:
        """Every playbook that fired (any severity, any engine) and when it first did."""
        out: dict[str, float] = {}
        for ev in self.evaluations:
            for f in ev.findings:
                out.setdefault(f.playbook, ev.t_s)
        return out

    @property
    def false_positives(self) -> list[FalsePositive]:
        """Warning or critical findings that are not the incident: other playbooks (except its known
        consequences after onset), or the expected one before the onset."""
        sc = self.scenario
        out = []
        for ev in self.evaluations:
            for f in ev.findings:
                if f.severity == "info":
                    continue
                after_onset = sc.onset_s is not None and ev.t_s >= sc.onset_s
                if after_onset and (self._expected(f) or f.playbook in sc.consequences):
                    continue
                out.append(FalsePositive(ev.t_s, f.playbook, f.engine, f.severity, f.summary))
        return out

    def timeline(self, signals: Sequence[str] = ()) -> str:
        """Findings per evaluation (and chosen signal values), for reports and failing tests."""
        lines = [f"scenario {self.scenario.name} seed {self.seed} onset {self.scenario.onset_s}"]
        for ev in self.evaluations:
            found = ", ".join(f"{f.playbook}/{f.engine}/{f.severity}" for f in ev.findings) or "-"
            lines.append(f"  t={ev.t_s:6.0f}s  {found}")
            for name in signals:
                vals = "  ".join(f"{e}={_fmt(s.values.get(name))}" for e, s in ev.signals.items())
                lines.append(f"           {name}: {vals}")
        return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
