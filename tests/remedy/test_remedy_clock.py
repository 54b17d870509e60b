"""The remediation machinery keeps the clock it is given (#13): guardrails, journal, audit, records and cooldowns
in virtual time, so the trials can run the real remediator; the actuators dial the transport they are given."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import httpx

from doctor.config import DoctorConfig
from doctor.remedy.setup import remediator
from playbooks.model import Action, Evidence, Finding

T0 = 1_000_000.0  # virtual time, far from the wall clock


def _router() -> tuple[httpx.MockTransport, list[dict[str, object]]]:
    puts: list[dict[str, object]] = []
    doc: dict[str, object] = {"version": 1, "upstreams": {"hot": [{"name": "hot", "url": "http://hot.sim"}],
                                                          "cold": []}}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            body = json.loads(request.content)
            puts.append(body)
            doc.update(body, version=int(doc["version"]) + 1)  # type: ignore[call-overload]
            return httpx.Response(200, json={"version": doc["version"], "changes": ["length_limit_tokens"]})
        return httpx.Response(200, json=doc)

    return httpx.MockTransport(handle), puts


def _finding() -> Finding:
    return Finding("p99_spike", "hot", "critical", 0.9, "P99 over the SLO",
                   (Evidence("p99_e2e_s", 9.0, 2.0, 60.0),),
                   (Action("length_limit", "router", {"max_tokens": 8192}, risk="low"),), "runbook", T0 - 300)


def test_a_remediator_on_a_virtual_clock_records_and_cools_down_in_virtual_time(tmp_path: Path) -> None:
    now = [T0]
    transport, puts = _router()
    config = replace(DoctorConfig(), mode="auto")
    rem = remediator(config, tmp_path, router_url="http://router.sim", clock=lambda: now[0], transport=transport,
                     environ={})
    [rec] = asyncio.run(rem.fix([_finding()], {}))
    assert rec.status == "applied", rec.reason
    assert puts and rec.created_at == rec.updated_at == T0
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert audit and all(a["at"] == T0 for a in audit)
    journal = [json.loads(line) for line in rem.journal.path.read_text().splitlines()]
    assert journal and all(j["at"] == T0 for j in journal if "at" in j)
    assert rem.guard.cooldown_left("length_limit", "router") == config.cooldown_s
    now[0] += config.cooldown_s / 2  # half the cooldown passes in virtual time
    assert rem.guard.cooldown_left("length_limit", "router") == config.cooldown_s / 2
