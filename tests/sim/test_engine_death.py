"""An engine death over real HTTP: one access line per request in flight, none made up."""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest

from sim.testing import engine_thread

ACCESS = re.compile(r'INFO:     (?P<client>[\d.]+):(?P<port>\d+) - "(?P<method>\w+) (?P<path>\S+) HTTP/1.1" '
                    r'(?P<status>\d{3}) ')
# Slow enough that requests are still in flight when the fault is posted; nothing waits on its speed.
SLOW = ["m", "--enforce-eager", "--time-scale", "50", "--sim-fault-endpoint", "--max-num-seqs", "4"]


def _access(lines: list[str], path: str) -> list[re.Match[str]]:
    return [m for line in lines if (m := ACCESS.search(line)) and m["path"] == path]


def _running_and_waiting(c: httpx.Client) -> float:
    total = 0.0
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("fault", ["xid:79", "engine-death"])
def test_death_writes_one_access_line_per_request_in_flight(fault: str) -> None:
    n = 9
    with engine_thread(SLOW) as eng, httpx.Client(base_url=eng.url, timeout=60) as c:
        statuses: list[int] = []

        def send(stream: bool) -> None:
            body = {"prompt": "hi", "max_tokens": 500, "stream": stream}
            with httpx.Client(base_url=eng.url, timeout=60) as own, own.stream("POST", "/v1/completions",
                                                                                json=body) as r:
                r.read()
                statuses.append(r.status_code)

        threads = [threading.Thread(target=send, args=(i % 3 == 0,)) for i in range(n)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while _running_and_waiting(c) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _running_and_waiting(c) == n
        assert c.post("/sim/fault", json={"fault": fault}).status_code == 200
        for t in threads:
            t.join(30)
        lines = list(eng.logs)
    # Non-streaming requests get a 500 at death; streaming ones had their 200 line when the stream began
    # (uvicorn logs at the response start) and carry the error in the stream.
    assert sorted(statuses) == sorted([200] * 3 + [500] * (n - 3))
    done = _access(lines, "/v1/completions") + _access(lines, "/v1/chat/completions")
    assert sorted(m["status"] for m in done) == sorted(["200"] * 3 + ["500"] * (n - 3))
    assert len({m["port"] for m in done}) == n  # one line per client connection, none made up


def test_death_with_nothing_in_flight_writes_no_access_line() -> None:
    with engine_thread(SLOW) as eng, httpx.Client(base_url=eng.url, timeout=60) as c:
        assert c.post("/sim/fault", json={"fault": "engine-death"}).status_code == 200
        time.sleep(0.2)
        lines = list(eng.logs)
    assert any("EngineDeadError" in line for line in lines)
    assert _access(lines, "/v1/completions") == [] and _access(lines, "/v1/chat/completions") == []


@pytest.mark.parametrize("core_process", [False, True])
def test_runtime_oom_in_an_engine_core_process_writes_only_the_core_half(core_process: bool) -> None:
    """The EngineCore writes its traceback; the API server (sim.core_mp) writes EngineDeadError and shuts down."""
    from sim.args import parse_engine_args
    from sim.engine import EngineCore
    from sim.gpu import MemoryLedger
    from sim.runtime import EngineRuntime

    config, options = parse_engine_args(["m", "--enforce-eager", "--vllm-version", "0.11"], env={})
    core = EngineCore(config, options.preset, options.profile, now=1000.0, ledger=MemoryLedger(), owner="x:1",
                      faults=options.faults)
    lines: list[str] = []
    runtime = EngineRuntime(core, lines.extend, host="127.0.0.1", port=1, dev_mode=False, core_process=core_process)
    runtime.start(1000.0)
    lines.clear()
    runtime._log_oom_death(1001.0)
    text = "\n".join(lines)
    assert "torch.OutOfMemoryError: CUDA out of memory." in text
    assert ("Shutting down" in text) is not core_process
    assert ("EngineDeadError" in text) is not core_process
