"""Start-up takes time and pays it before serving; cold-start penalties only on eager steps; the cap in /server_info."""

from __future__ import annotations

import calendar
import re
import socket
import time

import httpx
import pytest

from sim.args import parse_engine_args
from sim.engine_cli import EngineThread
from sim.harness import Harness
from sim.presets import get_preset
from sim.profiles import get_profile
from sim.steptime import StepCost
from sim.testing import engine_thread
from sim.workload import RequestSpec

TS = re.compile(r"(?:INFO|WARNING) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def _ts(line: str, year: int) -> float | None:
    m = TS.search(line)
    if not m:
        return None
    mo, d, hh, mm, ss = (int(x) for x in m.groups())
    return float(calendar.timegm((year, mo, d, hh, mm, ss)))


def _spec(i: int, prompt: int = 8, out: int = 2, at: float = 1.0) -> RequestSpec:
    return RequestSpec(index=i, arrival_s=at, prompt_tokens=prompt, output_tokens=out, long=False)


def test_a_launched_engine_refuses_until_its_start_up_has_passed_in_virtual_time() -> None:
    h = Harness()
    e = h.add_engine("e", ["m"], starting=True)
    plan = e.core.startup
    assert plan.total_s > 20 and plan.compile_s > 0 and plan.graphs_s > 0  # weights, compile, graphs
    assert e.core.ready_at == pytest.approx(h.now + plan.total_s)
    early = h.submit("e", _spec(0, at=5.0))
    late = h.submit("e", _spec(1, at=plan.total_s + 1.0))
    h.run_for(plan.total_s / 2)
    assert not h.listening("e")
    assert not any("Application startup complete." in line for line in h.log_lines("e"))
    h.drain()
    assert early.error == "connection refused"
    assert late.error is None and late.finish_reason == "length"
    assert any("Application startup complete." in line for line in h.log_lines("e"))


def test_start_up_lines_are_in_order_and_never_before_the_process_start() -> None:
    h = Harness()
    e = h.add_engine("e", ["m"])  # already up: its process started its start-up ago
    year = time.gmtime(h.now).tm_year
    stamps = [t for t in (_ts(line, year) for line in h.log_lines("e")) if t is not None]
    start = e.core.metrics.process.start_time
    assert start == pytest.approx(h.now - e.core.startup.total_s)
    assert stamps == sorted(stamps)
    assert stamps[0] >= int(start)
    init = next(line for line in h.log_lines("e") if "init engine" in line)
    took = float(re.search(r"took (\d+\.\d+) s", init)[1])  # type: ignore[index]
    assert took == pytest.approx(e.core.startup.init_s, abs=0.01)


def test_enforce_eager_skips_compile_and_graph_capture() -> None:
    h = Harness()
    graphs = h.add_engine("g", ["m"]).core.startup
    eager = h.add_engine("x", ["m", "--enforce-eager"], env={"CUDA_VISIBLE_DEVICES": "1"}).core.startup
    assert eager.compile_s == 0 and eager.graphs_s == 0 and eager.graph_sizes == ()
    assert eager.total_s < graphs.total_s - 10
    assert not any("Graph capturing" in line for line in h.log_lines("x"))
    assert any("Graph capturing" in line for line in h.log_lines("g"))


def test_sim_startup_scale_zero_serves_at_once() -> None:
    h = Harness()
    e = h.add_engine("e", ["m", "--sim-startup-scale", "0"], starting=True)
    assert e.core.ready_at == h.now and h.listening("e")


@pytest.mark.parametrize(("profile", "seqs", "expect_len", "expect_top"), [
    ("0.33", 256, 51, 512), ("0.33", 16, 7, 32), ("0.10", 16, 67, 512), ("0.6", 256, 35, 256), ("0.6", 16, 5, 16),
])
def test_capture_sizes_per_release(profile: str, seqs: int, expect_len: int, expect_top: int) -> None:
    from sim.startup import capture_sizes
    config, _ = parse_engine_args(["m", "--vllm-version", profile, "--max-num-seqs", str(seqs)], env={})
    sizes = capture_sizes(config, get_profile(profile), get_preset("a100-13b"))
    assert len(sizes) == expect_len and sizes[-1] == expect_top and sizes == tuple(sorted(sizes))
    eager, _ = parse_engine_args(["m", "--vllm-version", profile, "--enforce-eager"], env={})
    assert capture_sizes(eager, get_profile(profile), get_preset("a100-13b")) == ()


def _first_burst_busy(argv: list[str], batch: int) -> float:
    """Seconds of engine busy time for `batch` short requests arriving together on a fresh (ready) engine."""
    h = Harness()
    e = h.add_engine("e", argv)
    steps: list[float] = []

    def observe(end: float, cost: StepCost) -> None:
        steps.append(cost.duration_s)

    e.core.step_observer = observe
    for i in range(batch):
        h.submit("e", _spec(i, at=1.0))
    h.drain()
    return sum(steps)


def test_cuda_graphs_pay_no_cold_start_but_eager_steps_do() -> None:
    graphs = _first_burst_busy(["m", "--max-num-seqs", "64"], 16)  # graphs up to 128 tokens
    eager = _first_burst_busy(["m", "--max-num-seqs", "64", "--enforce-eager"], 16)
    assert graphs < 0.2  # captured before /health was ready: no first-request penalty
    # The first arrival starts a batch-1 step alone, the other 15 join the next (class 16): the seed's figures.
    assert eager - graphs == pytest.approx(1.2 * ((1 / 4) ** 0.83 + (16 / 4) ** 0.83), rel=0.02)


def test_a_step_above_the_captured_sizes_runs_eagerly_and_pays_once() -> None:
    h = Harness()
    e = h.add_engine("e", ["m", "--max-num-seqs", "16"])  # 0.33: graphs up to 32 tokens
    steps: list[float] = []
    e.core.step_observer = lambda end, cost: steps.append(cost.duration_s)
    h.submit("e", _spec(0, prompt=600, out=1, at=1.0))
    h.submit("e", _spec(1, prompt=600, out=1, at=30.0))
    h.drain()
    assert steps[0] - steps[-1] == pytest.approx(1.2 * (1 / 4) ** 0.83, rel=0.05)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_http_engine_refuses_connections_until_its_start_up_is_over() -> None:
    port = _free_port()
    engine = EngineThread(["m", "--port", str(port), "--sim-startup-scale", "0.05"]).launch()
    try:
        refused = 0
        deadline = time.monotonic() + 60
        while not any("Application startup complete." in line for line in engine.logs):
            if engine.logs:  # the process is up and printing its start-up
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    assert any("Application startup complete." in line for line in engine.logs)
                except ConnectionRefusedError:
                    refused += 1
            assert time.monotonic() < deadline
            time.sleep(0.02)
        engine.wait_ready()
        assert refused > 0
        assert httpx.get(engine.url + "/health").status_code == 200
    finally:
        engine.stop()


@pytest.mark.parametrize("profile", ["0.33", "0.20", "0.11"])
def test_server_info_json_shows_the_sequence_cap(profile: str) -> None:
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    with engine_thread(["m", "--max-num-seqs", "24", "--vllm-version", profile], env=env) as eng:
        body = httpx.get(eng.url + "/server_info", params={"config_format": "json"}).json()
        text = httpx.get(eng.url + "/server_info").json()["vllm_config"]
        line = next(x for x in eng.logs if "with config: " in x).split("with config: ", 1)[1]
    assert body["vllm_config"]["scheduler_config"]["max_num_seqs"] == 24
    assert ("vllm_env" in body) == (profile != "0.11")
    assert text == line and "max_num_seqs" not in text  # str(VllmConfig), as the start-up line prints it


@pytest.mark.parametrize(("profile", "status"), [("0.10", 200), ("0.6", 404)])
def test_server_info_before_0_11_is_text_only_and_absent_in_0_6(profile: str, status: int) -> None:
    with engine_thread(["m", "--vllm-version", profile], env={"VLLM_SERVER_DEV_MODE": "1"}) as eng:
        r = httpx.get(eng.url + "/server_info", params={"config_format": "json"})
    assert r.status_code == status
    if status == 200:
        assert set(r.json()) == {"vllm_config"} and isinstance(r.json()["vllm_config"], str)
