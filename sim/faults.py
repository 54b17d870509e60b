"""Fault injection: what can go wrong with an engine, when, and how it is written on the command line.

Spec syntax (`--fault`, repeatable): `KIND[@SECONDS][:ARG]`, times relative to engine start.

| kind | arg | effect |
| --- | --- | --- |
| `engine-death` | - | the engine core dies: in-flight requests fail, /health fails, death lines |
| `hang` | - | alive but not serving: /health stays 200, no token progress, requests wait |
| `cuda-oom-start` | - | start-up fails with CUDA out of memory |
| `fragmentation` | growth/hour (0.3) | memory held beyond the footprint grows; sleep/wake or restart clears it |
| `xid` | Xid code (79) | an Xid error on the engine's GPU; fatal classes kill the engine |
| `slow-metrics` | seconds (5) | /metrics answers that much later |
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("engine-death", "hang", "cuda-oom-start", "fragmentation", "xid", "slow-metrics")
_DEFAULT_ARG = {"fragmentation": 0.3, "xid": 79.0, "slow-metrics": 5.0}


class FaultSpecError(ValueError):
    """A --fault value that cannot be understood."""


@dataclass(frozen=True)
class TimedFault:
    at_s: float
    kind: str
    arg: float


@dataclass
class FaultPlan:
    """Standing faults plus timed ones still to fire."""

    cuda_oom_at_start: bool = False
    fragmentation_per_hour: float = 0.0
    hung: bool = False
    slow_metrics_s: float = 0.0
    timed: list[TimedFault] = field(default_factory=list)

    def due(self, elapsed_s: float) -> list[TimedFault]:
        """Pop the timed faults whose time has come."""
        ready = [f for f in self.timed if f.at_s <= elapsed_s]
        self.timed = [f for f in self.timed if f.at_s > elapsed_s]
        return ready

    def next_at(self) -> float | None:
        return min((f.at_s for f in self.timed), default=None)


def parse_fault(spec: str) -> TimedFault:
    """Parse `KIND[@SECONDS][:ARG]`."""
    text = spec.strip()
    arg_text: str | None = None
    if ":" in text:
        text, arg_text = text.split(":", 1)
    at_text = "0"
    if "@" in text:
        text, at_text = text.split("@", 1)
    kind = text.strip()
    if kind not in KINDS:
        raise FaultSpecError(f"unknown fault {kind!r} in {spec!r}; known faults: {', '.join(KINDS)}")
    try:
        at = float(at_text)
        arg = float(arg_text) if arg_text is not None else _DEFAULT_ARG.get(kind, 0.0)
    except ValueError:
        raise FaultSpecError(f"bad fault spec {spec!r}: expected KIND[@SECONDS][:NUMBER]") from None
    if at < 0 or arg < 0:
        raise FaultSpecError(f"bad fault spec {spec!r}: times and values must not be negative")
    return TimedFault(at, kind, arg)


def build_plan(specs: list[str]) -> FaultPlan:
    """Standing faults take effect at start; the rest are timed."""
    plan = FaultPlan()
    for spec in specs:
        f = parse_fault(spec)
        if f.kind == "cuda-oom-start":
            plan.cuda_oom_at_start = True
        elif f.at_s == 0 and f.kind == "fragmentation":
            plan.fragmentation_per_hour = f.arg
        elif f.at_s == 0 and f.kind == "slow-metrics":
            plan.slow_metrics_s = f.arg
        else:
            plan.timed.append(f)
    plan.timed.sort(key=lambda f: f.at_s)
    return plan
