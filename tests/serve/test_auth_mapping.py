"""Credentials and the alert -> engine/playbook mapping."""

from __future__ import annotations

import base64

from doctor.engines import EngineRef
from doctor.serve.alerts import parse
from doctor.serve.auth import Credentials, check
from doctor.serve.mapping import AlertMapper
from tests.serve.payloads import alert, body

CREDS = Credentials(write_token="w-tok", alert_token="a-tok", read_token="r-tok", basic_user="am",
                    basic_password="pw")


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_each_kind_of_call_needs_its_credential() -> None:
    basic = {"authorization": "Basic " + base64.b64encode(b"am:pw").decode()}
    assert check(CREDS, bearer("a-tok"), "alert") is None and check(CREDS, basic, "alert") is None
    assert check(CREDS, bearer("w-tok"), "alert") is not None  # an alert token of its own is set
    assert check(CREDS, {"authorization": "Basic " + base64.b64encode(b"am:no").decode()}, "alert") is not None
    assert check(CREDS, {"authorization": "Basic %%%"}, "alert") is not None
    assert check(CREDS, bearer("w-tok"), "write") is None
    denied = check(CREDS, bearer("r-tok"), "write")
    assert denied is not None and denied.status == 401
    assert check(CREDS, bearer("r-tok"), "read") is None and check(CREDS, bearer("w-tok"), "read") is None
    assert check(CREDS, {}, "read") is not None


def test_without_credentials_writes_and_alerts_are_off_and_reads_are_open() -> None:
    none = Credentials()
    for kind in ("write", "alert"):
        denied = check(none, bearer("anything"), kind)
        assert denied is not None and denied.status == 403 and "token_file" in denied.reason
    assert check(none, {}, "read") is None
    assert check(Credentials(write_token="w"), bearer("w"), "alert") is None  # the write token serves alerts too


def test_alerts_map_by_labels_then_tables() -> None:
    engines = [EngineRef("hot", "hot", "http://127.0.0.1:8000"), EngineRef("cold", "cold", "http://10.0.0.7:8001")]
    m = AlertMapper(engines, alert_playbooks={"MyKv": "kv_pressure"})
    [a, b, c, d, e] = parse(body(alert("a1"), alert("a2", instance="10.0.0.7:8001", playbook=None,
                                                    alertname="MyKv"),
                                 alert("a3", instance="x:1", engine="cold", playbook=None,
                                       alertname="VllmQueuePressure"),
                                 alert("a4", instance="nowhere:1"), alert("a5", playbook="no_such"))).alerts
    assert (m.target(a).engine, m.target(a).playbook) == ("hot", "long_prompt_share")
    assert (m.target(b).engine, m.target(b).playbook) == ("cold", "kv_pressure")
    assert (m.target(c).engine, m.target(c).playbook) == ("cold", "queue_pressure")  # the playbook's own alerts
    assert not m.target(d).known and "no configured engine" in m.target(d).why
    assert not m.target(e).known and "unknown playbook 'no_such'" in m.target(e).why


def test_the_router_s_own_alerts_go_to_the_engine_its_playbook_judges() -> None:
    """RouterDown and RouterMisrouteShare carry the router's host:port: router_down is judged on the first engine by
    name (where it reports, once), the misroute share on the first hot engine (long_prompt_share applies to hot)."""
    engines = [EngineRef("hot", "hot", "http://127.0.0.1:8000"), EngineRef("cold", "cold", "http://127.0.0.1:8001")]
    m = AlertMapper(engines, router="http://user:pw@127.0.0.1:8080")
    [down, misroute, elsewhere] = parse(body(
        alert("r1", instance="127.0.0.1:8080", job="router", alertname="RouterDown", playbook="router_down"),
        alert("r2", instance="127.0.0.1:8080", job="router", alertname="RouterMisrouteShare",
              playbook="long_prompt_share"),
        alert("r3", instance="127.0.0.1:9999", job="router", alertname="RouterDown", playbook="router_down"))).alerts
    assert (m.target(down).engine, m.target(down).playbook) == ("cold", "router_down")
    assert (m.target(misroute).engine, m.target(misroute).playbook) == ("hot", "long_prompt_share")
    assert not m.target(elsewhere).known and "no configured engine" in m.target(elsewhere).why
    # without a router configured, its alerts match no engine, as before
    assert not AlertMapper(engines).target(down).known
