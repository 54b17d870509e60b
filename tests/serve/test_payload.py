"""The webhook payload is checked field by field; a malformed one is refused with the reason."""

from __future__ import annotations

import json

import pytest

from doctor.serve.alerts import PayloadError, parse
from tests.serve.payloads import alert, body, message


def test_a_v4_message_becomes_alerts_with_their_dedupe_key() -> None:
    msg = parse(body(alert("aa11"), alert("bb22", status="resolved"), truncated=3))
    assert [a.fingerprint for a in msg.alerts] == ["aa11", "bb22"]
    assert msg.truncated == 3 and msg.status == "firing" and msg.receiver == "doctor"
    a = msg.alerts[0]
    assert a.key == "aa11|firing|2026-08-30T10:15:00.143Z"
    assert a.alertname == "VllmHotLongPromptShare" and a.labels["playbook"] == "long_prompt_share"
    assert a.group_key.startswith("{}:")


def test_newer_optional_fields_are_accepted() -> None:
    doc = message(alert())
    doc.update(notification_reason="x", routeLabels={"a": "b"})
    assert len(parse(json.dumps(doc).encode()).alerts) == 1


@pytest.mark.parametrize(("mutate", "says"), [
    (lambda d: d.update(version="3"), "version"),
    (lambda d: d.pop("alerts"), "alerts: expected a list"),
    (lambda d: d.update(status="maybe"), "status: expected firing or resolved"),
    (lambda d: d["alerts"][0].pop("fingerprint"), "alerts[0].fingerprint"),
    (lambda d: d["alerts"][0].update(fingerprint="../../etc"), "alerts[0].fingerprint"),
    (lambda d: d["alerts"][0].update(startsAt="yesterday"), "alerts[0].startsAt"),
    (lambda d: d["alerts"][0]["labels"].update(instance=7), "alerts[0].labels.instance"),
    (lambda d: d["alerts"][0]["labels"].pop("alertname"), "no alertname"),
    (lambda d: d.update(truncatedAlerts=-1), "truncatedAlerts"),
    (lambda d: d.update(commonLabels=[]), "commonLabels"),
])
def test_malformed_fields_are_named(mutate, says: str) -> None:  # type: ignore[no-untyped-def]
    doc = message(alert())
    mutate(doc)
    with pytest.raises(PayloadError, match=said(says)):
        parse(json.dumps(doc).encode())


def said(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b"[]", b"null", b'"4"'])
def test_garbage_is_a_payload_error_not_a_traceback(raw: bytes) -> None:
    with pytest.raises(PayloadError):
        parse(raw)
