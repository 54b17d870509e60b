"""Chaos: the monitoring around the doctor goes away. Prometheus down while the doctor reads history through it (it
reads the engines directly and says so); Alertmanager down while the doctor escalates (the page is kept, retried
by the next cycle and audited, never lost). Real sim engine processes, real Debian Alertmanager."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from doctor.remedy.escalate import ALERT_NAME
from tests.chaos.conftest import Record
from tests.serve.monitoring import alertmanager
from tests.serve.stack import audit, engines, seed_for_state, wait_for
from trials.live import LoadThread, Mix, diagnose_once, free_port

pytestmark = pytest.mark.timeout(240)


@contextmanager
def never_answers() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers a byte."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("how", ["refused", "hung"])
def test_prometheus_down_falls_back_to_direct_reads(how: str, tmp_path: Path, outcome: Record) -> None:
    with engines(["hot"], tmp_path) as eng, never_answers() as hung:
        prom = hung if how == "hung" else f"http://127.0.0.1:{free_port()}"
        load = LoadThread(eng["hot"].url, Mix(rate_qps=4.0, long_every=0, short_tokens=50, max_tokens=4)).start()
        try:
            run = diagnose_once(["--engine", f"hot={eng['hot'].url}", "--prometheus", prom, "--since", "15m",
                                 "--sample", "1s", "--request-timeout", "2s", "--state-dir", str(tmp_path / "s")])
        finally:
            load.stop()
    assert run.code in (0, 1), run.report  # read and judged, not "could not do its job" (3)
    [hot] = run.report["engines"]
    assert hot["reachable"] is True and hot["signals"]["qps"] is not None
    said = [e for e in hot["errors"] if "fell back to reading the engine directly" in e]
    assert said and prom in said[0], hot["errors"]
    assert run.report["window_s"] < 900  # the direct reads' window, not the 15 minutes asked of Prometheus
    outcome("recovered", f"Prometheus {how}: the engine read directly over the sample, the report says so "
                         f"({said[0][:90]}...)")


def test_alertmanager_down_while_escalating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            outcome: Record) -> None:
    am_port = free_port()  # nothing listens there yet: Alertmanager is down
    state = tmp_path / "state"
    with engines(["hot"], tmp_path, extra=["--sim-fault-endpoint"]) as eng:
        hot = eng["hot"].url
        monkeypatch.setenv("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "1")
        # The engine core dies but its API server stays up answering 500: error_rate, whose remedy is a page.
        assert httpx.post(hot + "/sim/fault", json={"fault": "engine-death"}, timeout=10).status_code == 200
        stop = threading.Event()

        def failing_requests() -> None:
            with httpx.Client(timeout=10, trust_env=False) as c:
                while not stop.is_set():
                    with suppress(httpx.HTTPError):
                        c.post(hot + "/v1/completions", json={"prompt": "a b", "max_tokens": 4})
                    stop.wait(0.05)

        sender = threading.Thread(target=failing_requests, daemon=True)
        sender.start()
        config = tmp_path / "doctor.toml"
        config.write_text(f'[doctor]\nstate_dir = "{state}"\nmode = "auto"\nsample_s = "1s"\nmin_requests = 1\n\n'
                          f'[escalation]\nalertmanager_url = "http://127.0.0.1:{am_port}"\n\n'
                          f'[[engines]]\nname = "hot"\nurl = "{hot}"\n')
        seed_for_state(state, "error_rate|hot", held_s=300)
        try:
            first = diagnose_once(["--config", str(config), "--fix"])
            assert first.code == 2, first.report
            [page] = [a for a in first.report["actions"] if a["action"] == "escalate"]
            assert "escalation not delivered" in page["reason"] and "retried" in page["reason"], page
            kept = json.loads((state / "escalations.json").read_text())
            assert [row["record"] for row in kept.values()] == [page["id"]]
            assert next(e["delivery"] for e in audit(state) if e["event"] == "escalated").startswith(
                "escalation not delivered")

            with alertmanager(tmp_path, {}, port=am_port) as am:  # Alertmanager is back, at the same address
                second = diagnose_once(["--config", str(config), "--fix"])
                assert second.code == 2, second.report
                retried = [e for e in audit(state) if e["event"] == "escalated" and e.get("retried")]
                assert [e["id"] for e in retried] == [page["id"]], audit(state)
                assert retried[0]["delivery"] == "paged via alertmanager (attempt 2)"
                assert json.loads((state / "escalations.json").read_text()) == {}  # nothing left undelivered

                def paged() -> list[dict]:
                    alerts = httpx.get(am + "/api/v2/alerts", timeout=5, trust_env=False).json()
                    return [a for a in alerts if a["labels"]["alertname"] == ALERT_NAME
                            and a["labels"]["engine"] == "hot" and a["labels"]["playbook"] == "error_rate"]

                assert wait_for("the page in Alertmanager", paged, timeout_s=30)
        finally:
            stop.set()
            sender.join(10)
    outcome("recovered", "the page was kept in escalations.json while Alertmanager was down, retried by the next "
                         "cycle and delivered (attempt 2), each attempt audited", lost=0)
