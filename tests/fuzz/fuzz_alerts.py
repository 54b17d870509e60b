"""Alertmanager's webhook body as `doctor serve` reads it, and each alert mapped to an engine and a playbook.
Contract: a Message, or PayloadError (HTTP 400); mapping any labels never raises."""

from __future__ import annotations

from doctor.engines import engines_from_flags
from doctor.serve.alerts import PayloadError, parse
from doctor.serve.mapping import AlertMapper

_MAPPER = AlertMapper(engines_from_flags(["hot=http://127.0.0.1:8000", "cold=http://127.0.0.1:8001"]))


def fuzz_one(data: bytes) -> None:
    try:
        msg = parse(data)
    except PayloadError:
        return
    for a in msg.alerts:
        assert a.fingerprint and a.labels.get("alertname")
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in a.labels.items())
        _MAPPER.target(a)
        _MAPPER.playbook(a)
