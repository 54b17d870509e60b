"""End to end on loopback with Debian's Prometheus and Alertmanager, sim engines and the real router.

Two deployments side by side, each a hot engine behind its own router (sharing a cold engine) and its own
`doctor serve`: one in auto mode, one in approve mode. Clients send half their requests as 9000-token documents
through the router, whose route threshold (16384) keeps them on the hot path. The shipped rule
VllmHotLongPromptShare (deploy/prometheus/rules.yml; its rate window and `for` shortened) fires in Prometheus,
Alertmanager posts it to each daemon with the bearer token from a file, the daemon's own reading confirms it
(once the playbook's `for` has passed), and the emergency length limit goes in: at once in auto mode, and only
after `doctor approve ID --daemon URL` in approve mode. The 413s keep the documents off the hot engine, the rule
resolves, Alertmanager says so, and the audit log holds the chain with the alert's fingerprint.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from doctor.actions_cli import main_for
from tests.serve.monitoring import alertmanager, prometheus, shipped_rule
from tests.serve.stack import Daemon, audit, daemon_for, engines, load, policy, router, wait_for, write_config

pytestmark = pytest.mark.timeout(600)
ALERT = "VllmHotLongPromptShare"


@dataclass
class Side:
    mode: str
    daemon: Daemon
    state: Path
    router_url: str
    tmp: Path

    def chain(self) -> list[dict[str, Any]]:
        """The audit lines about the rule's alert, and about the actions it triggered."""
        lines = audit(self.state)
        fps = {e["fingerprint"] for e in lines if e.get("alertname") == ALERT}
        return [e for e in lines if e.get("fingerprint") in fps
                or any(fp in str(e.get("trigger", "")) for fp in fps)]


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    tmp = Path(tmp_path_factory.mktemp("serve-e2e"))
    with ExitStack() as stack:
        eng = stack.enter_context(engines(["hot_auto", "hot_approve", "cold"], tmp))
        out: dict[str, Side] = {}
        for mode in ("auto", "approve"):
            work = tmp / mode
            work.mkdir()
            r = stack.enter_context(router(eng[f"hot_{mode}"].url, eng["cold"].url))
            config = write_config(work, hot=eng[f"hot_{mode}"].url, cold=eng["cold"].url, router_url=r.url,
                                  mode=mode, interval_s=2.0, doctor_extra='sample_s = "1s"')
            daemon = daemon_for(config, work).start()
            stack.callback(daemon.stop)
            out[mode] = Side(mode, daemon, work / "state", r.url, work)
        instances = {mode: eng[f"hot_{mode}"].url.removeprefix("http://") for mode in out}
        am = stack.enter_context(alertmanager(tmp, {
            mode: (instances[mode], s.daemon.url + "/v1/alerts", s.tmp / "api-token") for mode, s in out.items()}))
        stack.enter_context(prometheus(tmp, engines=list(instances.values()),
                                       doctors=[s.daemon.url.removeprefix("http://") for s in out.values()],
                                       rules=shipped_rule(ALERT, rate_window="15s", for_="3s"),
                                       alertmanager_url=am))
        for s in out.values():
            stack.callback(load(s.router_url).stop)
        yield out


def events(side: Side) -> list[str]:
    return [e["event"] for e in side.chain()]


def test_auto_mode_the_alert_is_confirmed_the_limit_applied_and_the_rule_resolves(sides: dict[str, Side]) -> None:
    side = sides["auto"]
    confirmed = wait_for("the alert confirmed by the doctor", lambda: [e for e in side.chain()
                                                                       if e["event"] == "alert_confirmed"],
                         timeout_s=300)[0]
    fp = confirmed["fingerprint"]
    assert confirmed["engine"] == "hot" and confirmed["playbook"] == "long_prompt_share"
    assert [a["action"] for a in confirmed["actions"]] == ["length_limit"], confirmed
    assert policy(side.router_url)["length_limit_tokens"] == 8192
    applied = [e for e in side.chain() if e["event"] == "applied"]
    assert [(e["action"], e["trigger"]) for e in applied] == [("length_limit", f"alert:{fp}")], side.chain()
    wait_for("the rule to resolve and Alertmanager to say so",
             lambda: any(e["event"] == "alert_resolved" and e["fingerprint"] == fp for e in side.chain()),
             timeout_s=240)
    seq = events(side)
    # the cycle that confirms the alert acts in it; the confirmation is audited when the cycle is done
    chain = ["alert_received", "begin", "applied", "alert_confirmed", "alert_resolved"]
    at = [seq.index(step) for step in chain]
    assert at == sorted(at), seq
    metrics = side.daemon.get("/metrics").text
    assert 'doctor_alerts_total{outcome="confirmed",status="firing"}' in metrics


def test_approve_mode_nothing_changes_until_a_person_approves(sides: dict[str, Side]) -> None:
    side = sides["approve"]
    confirmed = wait_for("the alert confirmed by the doctor", lambda: [e for e in side.chain()
                                                                       if e["event"] == "alert_confirmed"],
                         timeout_s=300)[0]
    fp = confirmed["fingerprint"]
    [action] = confirmed["actions"]
    assert action["action"] == "length_limit" and action["status"] == "pending"
    cycles = side.daemon.get("/v1/state").json()["cycles"]
    wait_for("two more cycles", lambda: side.daemon.get("/v1/state").json()["cycles"] >= cycles + 2)
    assert policy(side.router_url)["length_limit_tokens"] is None  # nothing changed
    assert not [e for e in side.chain() if e["event"] in ("begin", "applied")]
    pending = side.daemon.get("/v1/actions").json()["pending"]
    assert [p["id"] for p in pending] == [action["id"]]  # asked once, not once per cycle
    out, err = io.StringIO(), io.StringIO()
    code = main_for("approve", [action["id"], "--daemon", side.daemon.url, "--token-file",
                                str(side.tmp / "api-token")], out, err)
    assert code == 0, err.getvalue()
    assert policy(side.router_url)["length_limit_tokens"] == 8192
    applied = [e for e in side.chain() if e["event"] == "applied"]
    assert [(e["action"], e["trigger"]) for e in applied] == [("length_limit", f"alert:{fp}")]
    assert any(e["event"] == "approved" and "via the daemon's API" in str(e.get("who")) for e in side.chain())
    wait_for("the rule to resolve", lambda: any(e["event"] == "alert_resolved" and e["fingerprint"] == fp
                                                for e in side.chain()), timeout_s=240)
    seq = events(side)
    at = [seq.index(s) for s in ("alert_received", "queued", "alert_confirmed", "approved", "begin", "applied",
                                 "alert_resolved")]
    assert at == sorted(at), seq

