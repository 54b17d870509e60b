"""Two `doctor serve` replicas, one actor, over a real etcd on loopback: kill -9 the acting daemon mid-action and
the standby acts within the lease time; partition the leader from etcd and the two never act at once, proved
from their audit logs (each replica's acting intervals, and every change it made inside one of its own).

Each replica has its own state directory (as two machines would) and reads the same sim engines and router.
"""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.serve.etcd import etcd, proxy_to
from tests.serve.stack import Daemon, audit, daemon_for, engines, load, policy, router, wait_for, write_config

pytestmark = pytest.mark.timeout(300)
# Leases long beside the stalls of a loaded 2-core machine: a replica stalled past lease_s - margin_s rightly stops
# acting, which would change who leads here (never make two act).
LEASE_S, RENEW_S, MARGIN_S, RETRY_S = 8.0, 1.0, 2.0, 0.5
ACTS = ("begin", "applied", "reconciled", "lifting", "rolled_back")  # audit events of a change being made


def replica(tmp: Path, name: str, *, hot: str, cold: str, router_url: str, etcd_url: str) -> Daemon:
    work = tmp / name
    work.mkdir()
    leader = (f'\n[serve.leader]\nstore = "etcd"\nendpoints = ["{etcd_url}"]\nkey = "test/leader"\n'
              f'lease_s = {LEASE_S}\nrenew_s = {RENEW_S}\nmargin_s = {MARGIN_S}\nretry_s = {RETRY_S}\n'
              f'identity = "{name}"\n')
    config = write_config(work, hot=hot, cold=cold, router_url=router_url, interval_s=1.0, serve_extra=leader,
                          doctor_extra="\n[playbooks.long_prompt_share]\nfor_s = 0\n")
    return daemon_for(config, work)


def role(d: Daemon) -> str:
    return str(d.get("/v1/state").json()["leader"]["role"])


def leader_gauge(d: Daemon) -> float:
    line = next(x for x in d.get("/metrics").text.splitlines() if x.startswith("doctor_leader "))
    return float(line.split()[1])


def intervals(events: list[dict[str, Any]], died_at: float | None = None) -> list[tuple[float, float]]:
    """A replica's acting intervals from its audit log: from each leader_acquired to the leader_lost or
    leader_released that ends it (its `acted_until`); an open one ends at `died_at`, else at its acting_until."""
    out: list[tuple[float, float]] = []
    start: dict[str, Any] | None = None
    for e in events:
        if e["event"] == "leader_acquired":
            assert start is None, f"acquired twice without losing: {e}"
            start = e
        elif e["event"] in ("leader_lost", "leader_released"):
            assert start is not None, f"lost without holding: {e}"
            out.append((start["at"], float(e["acted_until"])))
            start = None
    if start is not None:
        out.append((start["at"], died_at if died_at is not None else time.time()))
    return out


def assert_acts_inside(events: list[dict[str, Any]], spans: list[tuple[float, float]]) -> None:
    for e in events:
        if e["event"] in ACTS:
            assert any(a <= e["at"] <= b for a, b in spans), f"{e['event']} at {e['at']} outside {spans}"


def assert_disjoint(*spans: list[tuple[float, float]]) -> None:
    every = sorted(s for group in spans for s in group)
    for (a0, a1), (b0, b1) in itertools.pairwise(every):
        assert a1 < b0, f"acting intervals overlap: {(a0, a1)} and {(b0, b1)}"


def test_kill_9_the_acting_leader_mid_action_the_standby_acts_within_the_lease(tmp_path: Path) -> None:
    with etcd(tmp_path / "etcd") as store, engines(["hot", "cold"], tmp_path) as eng, \
            router(eng["hot"].url, eng["cold"].url) as r:
        urls = {"hot": eng["hot"].url, "cold": eng["cold"].url, "router_url": r.url, "etcd_url": store}
        a, b = replica(tmp_path, "a", **urls), replica(tmp_path, "b", **urls)
        storm = None
        try:
            a.start({"SERVING_DOCTOR_CRASH_AT": "after-begin"}, ready=False)  # dies by SIGKILL right after journaling
            wait_for("A to lead", lambda: a.alive() and role(a) == "leader", timeout_s=90)
            b.start(ready=False)
            wait_for("both ready", lambda: all(d.alive() and d.get("/readyz").status_code == 200 for d in (a, b)),
                     timeout_s=90)
            wait_for("B to be standby", lambda: role(b) == "standby" and leader_gauge(b) == 0, timeout_s=60)
            assert leader_gauge(a) == 1
            storm = load(eng["hot"].url)  # 9000-token documents on the hot engine: both replicas see it
            assert a.wait_exit(120) == -signal.SIGKILL
            died_at = time.time()
            assert policy(r.url)["length_limit_tokens"] is None  # A died before changing the router
            wait_for("B to lead", lambda: role(b) == "leader", timeout_s=LEASE_S + 30)
            took_over_s = time.time() - died_at
            wait_for("B's length limit", lambda: policy(r.url)["length_limit_tokens"] == 8192, timeout_s=60)
            assert leader_gauge(b) == 1
        finally:
            if storm is not None:
                storm.stop()
            a.stop()
            b.stop()
    ea, eb = audit(tmp_path / "a" / "state"), audit(tmp_path / "b" / "state")
    begun = [e for e in ea if e["event"] == "begin"]
    assert [e["action"] for e in begun] == ["length_limit"] and not [e for e in ea if e["event"] == "applied"]
    applied = [e for e in eb if e["event"] == "applied"]
    assert [e["action"] for e in applied] == ["length_limit"]
    got_a = [e for e in ea if e["event"] == "leader_acquired"]
    got_b = [e for e in eb if e["event"] == "leader_acquired"]
    assert len(got_a) == 1 and len(got_b) == 1 and got_b[0]["fence"] > got_a[0]["fence"]
    spans_a, spans_b = intervals(ea, died_at=begun[0]["at"]), intervals(eb)
    assert_acts_inside(ea, spans_a)
    assert_acts_inside(eb, spans_b)
    assert_disjoint(spans_a, spans_b)
    # B acted on its own reading after taking over: its length limit came within the lease time of A's death
    # plus B's next look at etcd and one cycle (bounded generously above; the figure is printed)
    print(f"B leader {got_b[0]['at'] - begun[0]['at']:.1f} s after A's begin (then its SIGKILL), B's length limit "
          f"applied {applied[0]['at'] - begun[0]['at']:.1f} s after A's begin; lease {LEASE_S:g} s; B's leadership "
          f"seen by the test {took_over_s:.1f} s after A's exit was reaped")


def test_a_partitioned_leader_never_acts_beside_the_new_one(tmp_path: Path) -> None:
    with etcd(tmp_path / "etcd") as store, proxy_to(store) as cut_line, engines(["hot", "cold"], tmp_path) as eng, \
            router(eng["hot"].url, eng["cold"].url) as r:
        base = {"hot": eng["hot"].url, "cold": eng["cold"].url, "router_url": r.url}
        a = replica(tmp_path, "a", **base, etcd_url=cut_line.url)  # A reaches etcd only through the proxy
        b = replica(tmp_path, "b", **base, etcd_url=store)
        storm = None
        try:
            a.start(ready=False)
            wait_for("A to lead", lambda: a.alive() and role(a) == "leader", timeout_s=90)
            b.start(ready=False)
            wait_for("both ready", lambda: all(d.alive() and d.get("/readyz").status_code == 200 for d in (a, b)),
                     timeout_s=90)
            assert role(b) == "standby"
            cut_line.cut()
            wait_for("A to stop acting", lambda: role(a) == "standby" and leader_gauge(a) == 0,
                     timeout_s=LEASE_S + 30, every_s=0.05)
            wait_for("B to lead", lambda: role(b) == "leader" and leader_gauge(b) == 1, timeout_s=LEASE_S + 30)
            storm = load(eng["hot"].url)  # now both see a condition to act on; only B may
            wait_for("B's length limit", lambda: policy(r.url)["length_limit_tokens"] == 8192, timeout_s=60)
            wait_for("A to see it too, on standby", lambda: any(
                f["playbook"] == "long_prompt_share" for f in a.get("/v1/state").json()["findings"]), timeout_s=60)
            assert role(a) == "standby"  # still cut off: it does not act
            cut_line.heal()
            wait_for("A to see B's lease", lambda: (a.get("/v1/state").json()["leader"]["holder"] or "")
                     .startswith("b/"), timeout_s=30)
            assert role(a) == "standby" and role(b) == "leader"
            refused = a.post("/v1/actions/anything/approve", json_body={"who": "alice"})
            assert refused.status_code == 409 and "decide on the leader" in refused.json()["error"]
        finally:
            if storm is not None:
                storm.stop()
            a.stop()
            b.stop()
    ea, eb = audit(tmp_path / "a" / "state"), audit(tmp_path / "b" / "state")
    assert [e["event"] for e in ea if e["event"].startswith("leader_")] == ["leader_acquired", "leader_lost"]
    assert [e["event"] for e in eb if e["event"].startswith("leader_")] == ["leader_acquired", "leader_released"]
    assert not [e for e in ea if e["event"] in ACTS]  # A saw the long prompts and changed nothing
    assert [e["action"] for e in eb if e["event"] == "applied"] == ["length_limit"]
    lost = next(e for e in ea if e["event"] == "leader_lost")
    assert "not renewed" in lost["reason"] and lost["last_error"]
    spans_a, spans_b = intervals(ea), intervals(eb)
    assert_acts_inside(ea, spans_a)
    assert_acts_inside(eb, spans_b)
    assert_disjoint(spans_a, spans_b)
