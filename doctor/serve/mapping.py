"""Which engine and which playbook an alert is about.

The playbook: the alert's `playbook` label (the shipped rules carry one), else `[serve.alert_playbooks]`
(alertname -> playbook id), else the playbook that lists the alertname among its `alerts`. The engine: the first
of `[serve] engine_labels` (default engine, instance, job) whose value is an engine's name or its host:port; the
router's host:port stands for the first engine by name that the alert's playbook applies to, where the router's
own findings are reported (router_down on any engine, long_prompt_share's misrouting on a hot one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from doctor.engines import EngineRef
from doctor.serve.alerts import Alert
from playbooks import registry


@dataclass(frozen=True)
class Target:
    """The engine and playbook of an alert; `why` says what is unknown when either is None."""

    engine: str | None
    playbook: str | None
    why: str = ""

    @property
    def known(self) -> bool:
        return self.engine is not None and self.playbook is not None


class AlertMapper:
    """Maps alerts to (engine, playbook) by the configured labels and tables."""

    def __init__(self, engines: Sequence[EngineRef], *, labels: Sequence[str] = ("engine", "instance", "job"),
                 alert_playbooks: Mapping[str, str] | None = None, router: str | None = None) -> None:
        self.labels = tuple(labels)
        self.by_value: dict[str, str] = {}
        for e in engines:
            self.by_value.setdefault(e.instance, e.name)
            self.by_value[e.name] = e.name
        self.engines = tuple(engines)
        # The router's own alerts (RouterDown, RouterMisrouteShare) carry its host:port: judged on the first engine
        # by name that their playbook applies to (where router_down and long_prompt_share report).
        self.router_hostport = urlsplit(router).netloc.rpartition("@")[2] if router else ""
        self.alert_playbooks = dict(alert_playbooks or {})
        self.by_alertname = {name: pb.id for pb in registry.all_playbooks() for name in pb.alerts}

    def target(self, alert: Alert) -> Target:
        playbook = self.playbook(alert)
        engine = next((self.by_value[v] for label in self.labels if (v := alert.labels.get(label)) in self.by_value),
                      None)
        if engine is None and self.router_hostport and any(alert.labels.get(label) == self.router_hostport
                                                           for label in self.labels):
            engine = self._for_router(playbook)
        why = []
        if playbook is None:
            given = alert.labels.get("playbook")
            why.append(f"unknown playbook {given!r}" if given else
                       f"no playbook for alertname {alert.alertname!r} (no `playbook` label, not in "
                       "[serve.alert_playbooks])")
        if engine is None:
            shown = ", ".join(f"{k}={alert.labels[k]!r}" for k in self.labels if k in alert.labels) or "none"
            why.append(f"no configured engine matches its labels ({', '.join(self.labels)}: {shown})")
        return Target(engine, playbook, "; ".join(why))

    def _for_router(self, playbook: str | None) -> str | None:
        roles = registry.get(playbook).roles if playbook is not None else None
        names = [e.name for e in self.engines if roles is None or e.role is None or e.role in roles]
        return min(names) if names else None

    def playbook(self, alert: Alert) -> str | None:
        label = alert.labels.get("playbook")
        if label:
            return label if label in registry.ids() else None
        return self.alert_playbooks.get(alert.alertname) or self.by_alertname.get(alert.alertname)
