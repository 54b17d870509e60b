"""Alertmanager's webhook body as `doctor serve` reads it. Contract: a Message, or PayloadError (HTTP 400)."""

from __future__ import annotations

from doctor.serve.alerts import PayloadError, parse


def fuzz_one(data: bytes) -> None:
    try:
        msg = parse(data)
    except PayloadError:
        return
    for a in msg.alerts:
        assert a.fingerprint and a.labels.get("alertname")
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in a.labels.items())
