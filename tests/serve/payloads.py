"""Alertmanager webhook v4 bodies for the tests (the shape of ops-anchors section 2.1 and of a real
Alertmanager 0.25 post)."""

from __future__ import annotations

import json
from typing import Any

ZERO = "0001-01-01T00:00:00Z"


def alert(fingerprint: str = "c0ffee0123456789", *, status: str = "firing", alertname: str = "VllmHotLongPromptShare",
          instance: str = "127.0.0.1:8000", playbook: str | None = "long_prompt_share",
          starts_at: str = "2026-08-30T10:15:00.143Z", **labels: str) -> dict[str, Any]:
    lab = {"alertname": alertname, "instance": instance, "job": "vllm", "severity": "warning", **labels}
    if playbook is not None:
        lab["playbook"] = playbook
    return {"status": status, "labels": lab, "annotations": {"summary": "many long prompts"},
            "startsAt": starts_at, "endsAt": ZERO if status == "firing" else "2026-08-30T10:25:00Z",
            "generatorURL": "http://127.0.0.1:19090/graph?g0.expr=x", "fingerprint": fingerprint}


def message(*alerts: dict[str, Any], truncated: int = 0) -> dict[str, Any]:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    name = alerts[0]["labels"]["alertname"] if alerts else "x"
    return {"version": "4", "groupKey": '{}:{alertname="' + name + '"}', "truncatedAlerts": truncated,
            "status": status, "receiver": "doctor", "groupLabels": {"alertname": name},
            "commonLabels": {"alertname": name}, "commonAnnotations": {}, "externalURL": "http://127.0.0.1:19093",
            "alerts": list(alerts)}


def body(*alerts: dict[str, Any], truncated: int = 0) -> bytes:
    return json.dumps(message(*alerts, truncated=truncated)).encode()
