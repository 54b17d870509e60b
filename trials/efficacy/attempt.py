"""One attempt at one action in an efficacy run: the contract's ActionRecord plus what the harness needs to verify
and undo it."""

from __future__ import annotations

from dataclasses import dataclass

from doctor.remedy.model import ActionRecord, VerifySpec
from playbooks.model import Action, Finding


@dataclass(eq=False)
class Attempt:
    """One attempt: the contract's ActionRecord plus what the harness needs to verify and undo it."""

    record: ActionRecord
    action: Action
    finding: Finding | None
    decided: float
    effective: float | None = None
    inverse: Action | None = None
    verify: VerifySpec | None = None
    before: float | None = None
