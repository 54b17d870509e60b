"""The remediation room's contract: action records, actuators, what an actuator is given.

An ActionRecord follows one attempt at one Action through its life:
planned -> (pending ->) applied -> verified | rolled_back, or refused / failed / expired.
Everything here is plain data so records can live in the journal, the audit log and the approval
queue as JSON.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from playbooks.model import Action

Status = Literal["planned", "pending", "applied", "verified", "rolled_back", "refused", "failed", "expired"]
Mode = Literal["observe", "dry-run", "approve", "auto"]
TERMINAL: frozenset[str] = frozenset({"verified", "rolled_back", "refused", "failed", "expired"})


@dataclass(frozen=True)
class VerifySpec:
    """What must improve, and by when: `signal` must go `direction` ("down"/"up") past `target` (or by `ratio`)."""

    signal: str
    direction: Literal["down", "up"]
    target: float | None = None  # absolute goal, e.g. p99_ttft_s <= 1.0
    ratio: float | None = None  # relative goal, e.g. 0.8 = at least 20% better than before
    within_s: float = 120.0
    # When it did not help: keep the change and escalate instead of rolling back. For capacity added during an
    # overload: taking it away again (the inverse) would make the overload worse.
    keep_on_fail: bool = False

    def met(self, before: float | None, after: float | None) -> bool | None:
        """True/False when judged, None when the numbers are missing."""
        if after is None:
            return None
        if self.target is not None:
            return after <= self.target if self.direction == "down" else after >= self.target
        if self.ratio is not None and before is not None:
            return after <= before * self.ratio if self.direction == "down" else after >= before * self.ratio
        return None


@dataclass
class ActionRecord:
    """One attempt at one action."""

    action: dict[str, Any]  # playbooks.model.Action.to_dict()
    engine: str
    playbook: str
    finding_id: str
    status: Status = "planned"
    reason: str = ""
    trigger: str = "cron"  # cron | serve | webhook:<alert> | person:<name>
    id: str = field(default_factory=lambda: "run-" + uuid.uuid4().hex[:12])
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    before: dict[str, float | None] = field(default_factory=dict)
    after: dict[str, float | None] = field(default_factory=dict)
    inverse: dict[str, Any] | None = None  # the concrete undo, known once applied
    verify: dict[str, Any] | None = None  # VerifySpec as a dict
    steps: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.action["action"])

    @property
    def target(self) -> str:
        return str(self.action["target"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ActionRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def report(self) -> dict[str, Any]:
        """The report's `actions` entry (schemas/diagnose-report.schema.json)."""
        return {"id": self.id, "action": self.kind, "target": self.target, "params": dict(self.action["params"]),
                "status": self.status, "reason": self.reason or None, "finding": self.finding_id,
                "engine": self.engine}


@dataclass(frozen=True)
class Applied:
    """What an actuator did: the concrete inverse Action and a description of each step."""

    inverse: Action | None
    steps: tuple[str, ...] = ()
    changed: Mapping[str, Any] = field(default_factory=dict)


class ActuatorError(Exception):
    """An action could not be applied; the actuator left nothing half changed (or says what it left)."""


class Refused(Exception):
    """An action outside its bounds, for an unknown engine, or otherwise not allowed; nothing was done."""


@dataclass
class EngineTarget:
    """What actuators know of an engine (from the config)."""

    name: str
    role: str | None
    url: str
    launcher: str | None = None  # command template (doctor.config EngineConfig.launch_command)
    gpus: tuple[int, ...] = ()
    max_model_len: int | None = None
    args: dict[str, Any] = field(default_factory=dict)  # current vLLM args (max_num_seqs, ...)
    dcgm: str | None = None  # dcgm-exporter URL of the engine's GPUs (defragment checks memory was freed)


@dataclass
class ActuatorContext:
    """Everything actuators may touch, passed in (tests substitute any of it)."""

    engines: Mapping[str, EngineTarget]
    state_dir: Path
    router_url: str | None = None
    router_token: str | None = field(default=None, repr=False)  # never logged, never in a repr
    templates: tuple[str, ...] = ()
    bounds: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 10.0


@dataclass
class LaunchedEngine:
    """One engine process a launcher started (its record under STATE_DIR/engines/NAME@PORT.json)."""

    name: str
    pid: int
    port: int
    url: str
    gpus: tuple[int, ...]
    command: str
    log: str
    args: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    create_time: float | None = None  # psutil's, to tell a reused pid apart
    role: str | None = None  # hot | cold: a replica is read and judged in its engine's role

    @property
    def key(self) -> str:
        return f"{self.name}@{self.port}"


class Launcher(Protocol):
    """A backend that can (re)start engines: doctor.remedy.launcher.LocalLauncher; systemd or Kubernetes can follow."""

    async def relaunch(self, target: EngineTarget, ctx: ActuatorContext, changes: Mapping[str, Any]) -> Applied: ...

    def adopt(self) -> list[LaunchedEngine]: ...


class Actuator(Protocol):
    """Applies some kinds of Action (playbooks.model.ACTION_KINDS) against the real thing it drives."""

    kinds: tuple[str, ...]

    def check(self, action: Action, ctx: ActuatorContext) -> None:
        """Raise Refused (with the reason) when the action may not be applied as asked."""

    async def apply(self, action: Action, ctx: ActuatorContext) -> Applied:
        """Do it; raise ActuatorError after undoing any partial change."""


class LaunchingActuator(Launcher, Actuator, Protocol):
    """A launcher that is also the actuator of the launcher's kinds (relaunch, scale_out), as LocalLauncher is."""
