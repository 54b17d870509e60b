"""Chaos: the router killed (SIGKILL) in the middle of a streamed completion. The client sees a clean error at once
(the stream ends short, no `[DONE]`, never a hang), new connections are refused, the engine lets the orphaned request
go, and `doctor diagnose` reports the router unreachable while still reading the engines (one critical
`router_down` finding). Restarted on its port, the router serves again and the doctor reads it again. The router,
the sim engines and the doctor are processes."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from doctor.diagnose import main as diagnose_main
from tests.chaos.conftest import Record
from tests.chaos.procs import diagnose
from tests.serve.stack import ROOT, engines, wait_for
from trials.live import free_port

pytestmark = pytest.mark.timeout(240)


@contextmanager
def router_process(hot: str, cold: str, port: int, tmp: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(tmp / f"router-{port}.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "doctor.cli", "router", "--hot", hot, "--cold", cold,
                                 "--port", str(port), "--policy-file", str(tmp / "policy.json")],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        def up() -> bool:
            assert proc.poll() is None, (tmp / f"router-{port}.log").read_text()
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code == 200

        wait_for("the router", up, timeout_s=60)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _running(engine: str) -> float:
    text = httpx.get(engine + "/metrics", timeout=5, trust_env=False).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running"))


def test_router_killed_mid_stream(tmp_path: Path, outcome: Record) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["--sample", "0.5s", "--request-timeout", "3s", "--state-dir", str(tmp_path / "state"), "--router", url]
    with engines(["hot", "cold"], tmp_path) as eng:
        args += ["--engine", f"hot={eng['hot'].url}", "--engine", f"cold={eng['cold'].url}"]
        with router_process(eng["hot"].url, eng["cold"].url, port, tmp_path) as proc:
            chunks: list[str] = []
            ask = {"model": "m", "prompt": "a " * 50, "max_tokens": 5000, "stream": True, "ignore_eos": True}
            with httpx.Client(timeout=httpx.Timeout(60.0), trust_env=False) as client, pytest.raises(
                    (httpx.RemoteProtocolError, httpx.ReadError)) as broke, \
                    client.stream("POST", url + "/v1/completions", json=ask) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    chunks.append(line)
                    if len(chunks) == 5:
                        assert _running(eng["hot"].url) >= 1
                        proc.kill()  # SIGKILL, mid-stream
            assert "data: [DONE]" not in chunks  # the client knows the answer is incomplete
            with pytest.raises(httpx.ConnectError):
                httpx.get(url + "/health", timeout=5, trust_env=False)
        wait_for("the engine to drop the orphaned request", lambda: _running(eng["hot"].url) == 0, timeout_s=60)

        down = diagnose(args)
        assert down.code == 2, down  # critical (router_down), not 3: the engines were read, the doctor did its job
        assert down.report is not None
        for e in down.report["engines"]:
            assert e["reachable"] is True
            assert any(x.startswith(f"router {url}:") for x in e["errors"]), e["errors"]
        # one finding for the deployment, on the first engine by name, with the read's error as evidence
        found = [(f["playbook"], f["engine"], f["severity"]) for f in down.report["findings"]
                 if f["playbook"] == "router_down"]
        assert found == [("router_down", "cold", "critical")], down.report["findings"]
        text = io.StringIO()
        diagnose_main([*args, "--no-history"], out=text, err=io.StringIO())  # what a person reads, in-process
        assert f"router {url}" in text.getvalue(), text.getvalue()

        with router_process(eng["hot"].url, eng["cold"].url, port, tmp_path):  # restarted on its port
            done = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": "a b", "max_tokens": 4},
                              timeout=60, trust_env=False)
            assert done.status_code == 200
            back = diagnose(args)
            assert back.report is not None
            assert not [x for e in back.report["engines"] for x in e["errors"] if x.startswith("router")], back
            assert not [f for f in back.report["findings"] if f["playbook"] == "router_down"], back.report
            assert {e["signals"].get("router_up") for e in back.report["engines"]} == {1.0}
    outcome("reported", f"the stream broke at once ({type(broke.value).__name__}, no [DONE]), the engine dropped "
                        "the orphaned request, doctor diagnose named the router unreachable in each engine's "
                        "errors and reported router_down once (critical); restarted, it served and was read again",
            lost=0)
