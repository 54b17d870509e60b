"""Alertmanager's webhook payload (version "4"), checked field by field: a malformed body is refused with the
reason (Alertmanager does not retry a 4xx), a good one becomes `Alert`s.

Shape (Alertmanager notify/webhook): version, groupKey, truncatedAlerts, status, receiver, groupLabels,
commonLabels, commonAnnotations, externalURL and `alerts`, each with status, labels, annotations, startsAt,
endsAt (the zero time 0001-01-01T00:00:00Z while firing), generatorURL and fingerprint. Newer fields
(notification_reason, routeLabels) are optional and ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("firing", "resolved")
MAX_ALERTS = 10_000
_FINGERPRINT = re.compile(r"^[0-9A-Za-z]{1,64}$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


class PayloadError(ValueError):
    """A body that is not an Alertmanager v4 webhook payload; the message says which field and why."""


@dataclass(frozen=True)
class Alert:
    """One alert of a webhook message."""

    fingerprint: str
    status: str  # firing | resolved
    labels: dict[str, str]
    starts_at: str
    ends_at: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    generator_url: str = ""
    group_key: str = ""

    @property
    def key(self) -> str:
        """What Alertmanager repeats on retries and HA partitions: fingerprint + status + startsAt."""
        return f"{self.fingerprint}|{self.status}|{self.starts_at}"

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "status": self.status, "labels": self.labels,
                "startsAt": self.starts_at, "endsAt": self.ends_at, "annotations": self.annotations,
                "generatorURL": self.generator_url, "groupKey": self.group_key}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Alert:
        return cls(str(d["fingerprint"]), str(d["status"]), dict(d["labels"]), str(d["startsAt"]),
                   str(d.get("endsAt", "")), dict(d.get("annotations") or {}), str(d.get("generatorURL", "")),
                   str(d.get("groupKey", "")))


@dataclass(frozen=True)
class Message:
    """One webhook POST: its alerts, and how many Alertmanager left out (max_alerts)."""

    alerts: tuple[Alert, ...]
    truncated: int
    status: str
    receiver: str
    group_key: str


def parse(body: bytes) -> Message:
    """The payload, or PayloadError naming what is wrong."""
    try:
        doc = json.loads(body)
    except UnicodeDecodeError:
        raise PayloadError("the body is not UTF-8 text") from None
    except ValueError as exc:
        raise PayloadError(f"the body is not JSON ({exc})") from None
    except RecursionError:  # the decoder recurses per nested array or object
        raise PayloadError("the body is JSON nested too deeply to read") from None
    if not isinstance(doc, dict):
        raise PayloadError(f"expected a JSON object, got {type(doc).__name__}")
    version = doc.get("version")
    if version != "4":
        raise PayloadError(f"version: expected \"4\" (Alertmanager's webhook payload), got {version!r}")
    status = _choice(doc, "status", "")
    receiver = _text(doc, "receiver", "", required=False)
    group_key = _text(doc, "groupKey", "", required=False)
    truncated = doc.get("truncatedAlerts", 0)
    if isinstance(truncated, bool) or not isinstance(truncated, int) or truncated < 0:
        raise PayloadError(f"truncatedAlerts: expected a whole number >= 0, got {truncated!r}")
    for key in ("groupLabels", "commonLabels", "commonAnnotations"):
        if key in doc:
            _labels(doc[key], key)
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError(f"alerts: expected a list, got {type(alerts).__name__ if alerts is not None else 'none'}")
    if len(alerts) > MAX_ALERTS:
        raise PayloadError(f"alerts: {len(alerts)} alerts in one message; at most {MAX_ALERTS}")
    return Message(tuple(_alert(a, i, group_key) for i, a in enumerate(alerts)), truncated, status, receiver,
                   group_key)


def _alert(a: Any, i: int, group_key: str) -> Alert:
    where = f"alerts[{i}]"
    if not isinstance(a, dict):
        raise PayloadError(f"{where}: expected an object, got {type(a).__name__}")
    fingerprint = _text(a, "fingerprint", where)
    if not _FINGERPRINT.match(fingerprint):
        raise PayloadError(f"{where}.fingerprint: expected up to 64 letters or digits, got {fingerprint[:80]!r}")
    labels = _labels(a.get("labels"), f"{where}.labels")
    if not labels.get("alertname"):
        raise PayloadError(f"{where}.labels: no alertname")
    starts = _time(a, "startsAt", where, required=True)
    return Alert(fingerprint, _choice(a, "status", where), labels, starts, _time(a, "endsAt", where, required=False),
                 _labels(a.get("annotations", {}), f"{where}.annotations"),
                 _text(a, "generatorURL", where, required=False), group_key)


def _text(d: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = d.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        name = f"{where}.{key}" if where else key
        raise PayloadError(f"{name}: expected a non-empty string, got {value!r}"[:200])
    return value


def _choice(d: dict[str, Any], key: str, where: str) -> str:
    value = d.get(key)
    if value not in STATUSES:
        name = f"{where}.{key}" if where else key
        raise PayloadError(f"{name}: expected firing or resolved, got {value!r}"[:200])
    return str(value)


def _time(d: dict[str, Any], key: str, where: str, *, required: bool) -> str:
    value = _text(d, key, where, required=required)
    if value and not _TIME.match(value):
        raise PayloadError(f"{where}.{key}: expected an RFC 3339 time like 2026-08-30T10:15:00Z, got {value!r}"[:200])
    return value


def _labels(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise PayloadError(f"{where}: expected an object of strings, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise PayloadError(f"{where}.{k}: expected a string, got {type(v).__name__}"[:200])
    return dict(value)
