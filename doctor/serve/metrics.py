"""The daemon's own /metrics (prometheus_client, in a registry of its own)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

SEEN_KEEP = 5000  # (action id, status) pairs remembered so an action is counted once per outcome


class DaemonMetrics:
    """Findings, actions, cycles, read errors, alerts and the queue, as the daemon sees them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.findings = Gauge("doctor_findings_active", "Findings of the latest cycle (pending: status=pending)",
                              ["playbook", "engine", "severity", "status"], registry=r)
        self.actions = Counter("doctor_actions", "Actions the doctor recorded, by kind and outcome",
                               ["kind", "outcome"], registry=r)
        self.cycle_s = Histogram("doctor_cycle_duration_seconds", "Duration of one doctor cycle", ["trigger"],
                                 buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120), registry=r)
        self.cycles = Counter("doctor_cycles", "Doctor cycles run, by how they ended", ["result"], registry=r)
        self.read_errors = Counter("doctor_read_errors", "Engines a cycle could not read (fully or in part)",
                                   ["engine"], registry=r)
        self.alerts = Counter("doctor_alerts", "Alerts received, by status and what became of them",
                              ["status", "outcome"], registry=r)
        self.posts = Counter("doctor_alert_posts", "Webhook posts, by HTTP status code", ["code"], registry=r)
        self.queue_depth = Gauge("doctor_alert_queue_depth", "Alerts accepted and not yet handled", registry=r)
        self.waiting = Gauge("doctor_alerts_waiting", "Alerts waiting for the doctor's reading to confirm them",
                             registry=r)
        self.ticks_skipped = Counter("doctor_ticks_skipped", "Interval ticks skipped: the previous cycle still ran",
                                     registry=r)
        self.leader = Gauge("doctor_leader", "1 while this replica may act (it holds the lease, or acts alone), 0 on "
                            "standby", registry=r)
        self.leader.set(1)
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def cycle(self, report: Mapping[str, Any]) -> None:
        """Update from one cycle's report."""
        self.findings.clear()
        for status in ("findings", "pending"):
            for f in report.get(status, []):
                self.findings.labels(f["playbook"], f["engine"], f["severity"],
                                     "active" if status == "findings" else "pending").inc()
        for e in report.get("engines", []):
            if not e.get("reachable") or e.get("errors"):
                self.read_errors.labels(e["name"]).inc()
        self.count_actions(report.get("actions", []))

    def count_actions(self, actions: Iterable[Mapping[str, Any]]) -> None:
        for a in actions:
            key = (str(a.get("id")), str(a.get("status")))
            if key in self._seen:
                continue
            self._seen[key] = None
            if len(self._seen) > SEEN_KEEP:
                self._seen.popitem(last=False)
            self.actions.labels(str(a.get("action")), str(a.get("status"))).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
