"""Escalation: page a person through Alertmanager's v2 API (so the usual routing applies), else a webhook."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

ALERT_NAME = "ServingDoctorEscalation"


class EscalationError(Exception):
    """Neither Alertmanager nor the webhook took the escalation."""


@dataclass(frozen=True)
class Escalation:
    """What a person is paged about."""

    summary: str
    engine: str
    playbook: str
    severity: str = "critical"
    action: str | None = None
    action_status: str | None = None
    evidence: str = ""
    runbook: str = ""
    finding_id: str = ""

    def labels(self) -> dict[str, str]:
        out = {"alertname": ALERT_NAME, "severity": self.severity, "engine": self.engine,
               "playbook": self.playbook, "source": "serving-doctor"}
        if self.action:
            out["action"] = self.action
        if self.action_status:
            out["action_status"] = self.action_status
        return out

    def annotations(self) -> dict[str, str]:
        out = {"summary": self.summary, "description": self.evidence or self.summary}
        if self.runbook:
            out["runbook_url"] = self.runbook
        if self.finding_id:
            out["finding_id"] = self.finding_id
        return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def alertmanager_payload(esc: Escalation, *, now: float, resolve_after_s: float = 3600.0,
                         generator_url: str = "") -> list[dict[str, Any]]:
    """The body of POST /api/v2/alerts: a list of postable alerts."""
    return [{"labels": esc.labels(), "annotations": esc.annotations(), "startsAt": _iso(now),
             "endsAt": _iso(now + resolve_after_s), "generatorURL": generator_url}]


def escalate(esc: Escalation, *, alertmanager_url: str | None, webhook_url: str | None,
             client: httpx.Client | None = None, clock: Any = time.time, timeout_s: float = 5.0) -> str:
    """Send it; returns where it went ("alertmanager" | "webhook"). Tries Alertmanager first."""
    own = client is None
    http = client or httpx.Client(timeout=timeout_s, trust_env=False)
    problems: list[str] = []
    try:
        if alertmanager_url:
            url = alertmanager_url.rstrip("/") + "/api/v2/alerts"
            try:
                r = http.post(url, json=alertmanager_payload(esc, now=clock()))
                if r.status_code // 100 == 2:
                    return "alertmanager"
                problems.append(f"Alertmanager {url} answered HTTP {r.status_code}: {r.text[:200]}")
            except httpx.HTTPError as exc:
                problems.append(f"Alertmanager {url}: {type(exc).__name__}: {exc}")
        if webhook_url:
            body: Mapping[str, Any] = {"labels": esc.labels(), "annotations": esc.annotations(), "at": _iso(clock())}
            try:
                r = http.post(webhook_url, json=body)
                if r.status_code // 100 == 2:
                    return "webhook"
                problems.append(f"webhook {webhook_url} answered HTTP {r.status_code}")
            except httpx.HTTPError as exc:
                problems.append(f"webhook {webhook_url}: {type(exc).__name__}: {exc}")
        if not alertmanager_url and not webhook_url:
            problems.append("no [escalation] alertmanager_url or webhook_url configured")
        raise EscalationError("; ".join(problems))
    finally:
        if own:
            http.close()
