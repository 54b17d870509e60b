"""From readings to findings: the one path shared by `doctor diagnose`, the daemon and the accuracy suite."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

from collectors.combine import EngineReading, config_of
from collectors.types import Signals
from playbooks.base import EngineView, HistoryView, NoHistory, Playbook
from playbooks.evaluate import evaluate
from playbooks.model import Finding
from playbooks.registry import all_playbooks


class PlaybookSettings(Protocol):
    """What the doctor's config tells the playbooks (doctor.config.DoctorConfig implements it)."""

    def params_for(self, playbook_id: str, engine: str) -> Mapping[str, float]: ...

    def playbook_enabled(self, playbook_id: str, engine: str) -> bool: ...

    def slo_for(self, engine: str) -> Mapping[str, float]: ...

    def templates_configured(self, engine: str) -> bool: ...


class DefaultSettings:
    """Seed defaults, every playbook on, no SLOs, no templates."""

    def params_for(self, playbook_id: str, engine: str) -> Mapping[str, float]:
        return {}

    def playbook_enabled(self, playbook_id: str, engine: str) -> bool:
        return True

    def slo_for(self, engine: str) -> Mapping[str, float]:
        return {}

    def templates_configured(self, engine: str) -> bool:
        return False


def build_views(readings: Sequence[EngineReading], signals: Mapping[str, Signals], *, now: float,
                settings: PlaybookSettings | None = None,
                history_for: Callable[[str], HistoryView] | None = None,
                in_progress: Callable[[str], bool] | None = None) -> list[EngineView]:
    """One EngineView per engine, each knowing its peers (for replica imbalance and capacity checks)."""
    settings = settings or DefaultSettings()
    views = [
        EngineView(
            name=r.name, role=r.role, signals=signals[r.name], params={}, now=now, config=config_of(r),
            history=history_for(r.name) if history_for else NoHistory(),
            templates_configured=settings.templates_configured(r.name), slo=settings.slo_for(r.name),
            change_in_progress=in_progress(r.name) if in_progress else False,
        )
        for r in readings
    ]
    memo: dict[object, object] = {"views": views}  # the pools' members come from here (playbooks.pool)
    for view in views:
        view.peers = [v for v in views if v is not view]
        view.memo = memo
    return views


def run_playbooks(views: Sequence[EngineView], state: MutableMapping[str, dict[str, Any]], *, now: float,
                  settings: PlaybookSettings | None = None, window_is_history: bool = False,
                  pending: list[Finding] | None = None) -> list[Finding]:
    """Evaluate every enabled playbook with the config's thresholds (pending conditions into `pending`)."""
    settings = settings or DefaultSettings()
    boundary = getattr(settings, "long_prompt_tokens", None)

    def params(pb: Playbook, engine: str) -> Mapping[str, float]:
        # The hot/cold boundary is one setting: `long_prompt_tokens` (which the long-prompt share is computed at)
        # is every playbook's `route_threshold_tokens` unless a threshold table sets it; the router's own
        # threshold, when read, comes first (the playbooks' view.value).
        own = settings.params_for(pb.id, engine)
        if boundary is not None and "route_threshold_tokens" in pb.defaults and "route_threshold_tokens" not in own:
            return {**own, "route_threshold_tokens": float(boundary)}
        return own

    def enabled(pb: Playbook, engine: str) -> bool:
        return settings.playbook_enabled(pb.id, engine)

    return evaluate(views, state, now=now, params_for=params, enabled=enabled, window_is_history=window_is_history,
                    pending=pending, playbooks=_with_for(getattr(settings, "for_of", None)))


def _with_for(for_of: Callable[[str], float | None] | None) -> list[Playbook] | None:
    """The playbooks with the `for` the config sets ([playbooks.<id>] for_s) instead of their own; None: as they are."""
    if for_of is None:
        return None
    out: list[Playbook] = []
    for pb in all_playbooks():
        own = for_of(pb.id)
        if own is not None and own != pb.for_s:
            pb = copy.copy(pb)
            pb.__dict__["for_s"] = own  # this copy only: the registered playbook keeps its own
        out.append(pb)
    return out
