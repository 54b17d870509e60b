"""Real-time smoke runs of `doctor sim scenario`: engines over HTTP on loopback, load, a fault through /sim/fault."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from collectors.gpu import DcgmSource
from collectors.logs import scan_file
from sim.scenario_cli import Deployment, main, run_scenario
from sim.scenarios import SCENARIOS, Incident


def test_list_names_every_scenario() -> None:
    out = io.StringIO()
    assert main(["--list"], out=out) == 0
    for name in SCENARIOS:
        assert name in out.getvalue()


def test_bad_arguments_are_usage_errors() -> None:
    err = io.StringIO()
    assert main(["no_such_scenario"], err=err) == 2
    assert "unknown scenario 'no_such_scenario'" in err.getvalue() and "healthy" in err.getvalue()
    assert main([], err=io.StringIO()) == 2
    assert main(["healthy", "--seconds", "0"], err=io.StringIO()) == 2
    assert main(["healthy", "--bogus"], err=io.StringIO()) == 2


def test_healthy_runs_briefly_and_prints_what_to_diagnose(tmp_path: Path) -> None:
    out = io.StringIO()
    code = main(["healthy", "--sim-startup-scale", "0", "--seconds", "3", "--no-warmup", "--log-dir", str(tmp_path)],
                out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "doctor diagnose --engine hot=http://127.0.0.1:" in text and "--engine cold=http://127.0.0.1:" in text
    assert "scenario finished" in text
    hot_line = next(line for line in text.splitlines() if line.startswith("hot:"))
    assert " 0 completed" not in hot_line, text
    log = (tmp_path / "hot.log").read_text()
    assert "vLLM" in log and '"POST /v1/completions HTTP/1.1" 200' in log  # start-up and access lines


def _health(url: str) -> int | None:
    try:
        return httpx.get(url + "/health", timeout=5).status_code
    except httpx.HTTPError:
        return None  # the API server already exited after the engine died


def _eventually(check: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_gpu_xid_fault_reaches_the_engine_over_http(tmp_path: Path) -> None:
    """The timeline's fault is injected through /sim/fault: the engine dies, dcgm-exporter shows Xid 79."""
    # The node's dcgm-exporter is not the engine's: it still answers after the API server shut itself down.
    sc = dataclasses.replace(SCENARIOS["gpu_xid"], timeline=(Incident(1.5, "hot", "fault", spec="xid:79"),))
    dep = Deployment(sc, seed=0, port_base=0, log_dir=tmp_path, startup_scale=0)
    said: list[str] = []
    try:
        dep.start_all()
        progress = asyncio.run(run_scenario(dep, 3.0, warmup=False, say=said.append))
        assert any("fault xid:79: HTTP 200" in s for s in said), said
        assert progress["hot"].failed > 0 or progress["hot"].in_flight == 0
        assert _eventually(lambda: _health(dep.url("hot")) != 200), "the hot engine still answers /health 200"
        assert _eventually(lambda: _health(dep.url("hot")) is None), "the API server did not shut down"
        gpu = DcgmSource(dep.dcgm_url("hot"), httpx.Client(trust_env=False)).read()
        assert gpu[0].xid_last == 79 and gpu[0].fb_used_bytes == 0.0
        assert _eventually(lambda: any(e.kind == "engine_death"
                                       for e in scan_file(tmp_path / "hot.log", engine="hot").events))
        assert httpx.get(dep.url("cold") + "/health", timeout=5).status_code == 200
    finally:
        dep.stop_all()
