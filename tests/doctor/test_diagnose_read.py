"""`doctor diagnose` (reading half) against real sim engines on loopback, and its bad-input behaviour."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import jsonschema
import pytest

from collectors.combine import EngineReading, build_signals
from collectors.httpsource import read_engine
from collectors.types import SIGNAL_NAMES
from doctor.diagnose import EXIT_CRITICAL, EXIT_OK, EXIT_UNUSABLE, EXIT_WARNING, main
from sim.loadgen import run_load
from sim.testing import ALL_GRAPHED, engine_thread
from sim.workload import RequestSpec
from tests.badinput.crafted import metrics_server

FAST = [*ALL_GRAPHED, "--time-scale", "0.1"]


SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "diagnose-report.schema.json").read_text())


def _diagnose(args: list[str], tmp_path: Path) -> tuple[int, dict | None, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main([*args, "--state-dir", str(tmp_path / "state"), "--format", "json"], out=out, err=err)
    text = out.getvalue()
    report = json.loads(text) if text.strip() else None
    if report is not None:
        jsonschema.validate(report, SCHEMA, format_checker=jsonschema.FormatChecker())
    return code, report, err.getvalue()


def test_report_shape_and_signals_for_two_engines(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST]) as hot, engine_thread(["m", *FAST, "--vllm-version", "0.10"]) as cold:
        for url in (hot.url, cold.url):
            httpx.post(url + "/v1/completions", json={"prompt": "a b c", "max_tokens": 5}, timeout=30)
        code, report, err = _diagnose(["--engine", f"hot={hot.url}", "--engine", f"cold={cold.url}",
                                       "--sample", "0.5s"], tmp_path)
    assert code == EXIT_OK, err
    assert report is not None
    assert report["schema_version"] and report["generated_at"].endswith("Z") and report["doctor_version"]
    by_name = {e["name"]: e for e in report["engines"]}
    assert by_name["hot"]["role"] == "hot" and by_name["cold"]["role"] == "cold"
    assert by_name["hot"]["version_profile"] == "0.33" and by_name["cold"]["version_profile"] == "0.10"
    for e in report["engines"]:
        assert e["reachable"] is True
        assert e["signals"]["health"] == "ok"
        assert set(SIGNAL_NAMES) <= set(e["signals"])
        for name in SIGNAL_NAMES:  # every missing value says why
            assert e["signals"][name] is not None or name in e["signals"]["reasons"], name
        assert e["signals"]["running"] == 0
        assert e["signals"]["uptime_s"] > 0


def _specs(n: int, prompt: int, output: int) -> list[RequestSpec]:
    return [RequestSpec(index=i, arrival_s=0.05 * i, prompt_tokens=prompt, output_tokens=output, long=False)
            for i in range(n)]


def test_signals_agree_with_the_load_generator_over_http() -> None:
    async def scenario(url: str) -> tuple[EngineReading, object]:
        reading = EngineReading("hot", "hot", url)
        async with httpx.AsyncClient() as client:
            reading.samples += await read_engine(client, "hot", url, timeout_s=10)
            result = await run_load(url, _specs(20, 200, 30), seed=3)
            reading.samples += await read_engine(client, "hot", url, timeout_s=10, with_identity=False)
        return reading, result

    with engine_thread(["m", *FAST, "--max-num-seqs", "8"]) as eng:
        reading, result = asyncio.run(scenario(eng.url))
    metrics = [s for s in reading.samples if s.source == "metrics"]
    window = metrics[-1].timestamp - metrics[0].timestamp
    sig = build_signals(reading, window_s=window)
    ok = [r for r in result.results if r.success]  # type: ignore[attr-defined]
    assert len(ok) == 20
    assert sig.get("qps") * window == pytest.approx(20, abs=0.01)
    assert sig.get("generation_tokens_per_s") * window == pytest.approx(sum(r.output_tokens for r in ok), abs=0.01)
    assert sig.get("prompt_tokens_per_s") * window == pytest.approx(20 * 200, abs=0.01)
    assert sig.get("running") == 0 and sig.get("waiting") == 0
    # The client's P99 TTFT includes HTTP overhead, so it is at least the server's bucket lower bound.
    client_ttfts = sorted(r.ttft_s for r in ok)
    assert sig.get("p99_ttft_s") is not None
    assert client_ttfts[-1] >= sig.get("p50_ttft_s") * 0.5


def _garbage_server() -> contextlib.AbstractContextManager[str]:
    """A real HTTP server whose /metrics answers garbage and whose /health is fine."""
    return metrics_server(lambda _n: "vllm:num_requests_running{model_name=\"m\" 3\n\x00\x01garbage{{{\n")


def test_hung_metrics_and_garbage_scrape_do_not_stop_the_others(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST]) as good, engine_thread(["m", *FAST, "--fault", "slow-metrics:30"]) as hung, \
            _garbage_server() as garbage:
        code, report, err = _diagnose(["--engine", f"good={good.url}", "--engine", f"hung={hung.url}",
                                       "--engine", f"junk={garbage}", "--sample", "0.2s",
                                       "--request-timeout", "1s"], tmp_path)
    assert code == EXIT_WARNING, err  # two engines' /metrics cannot be read: engine_down as a warning
    assert report is not None
    by_name = {e["name"]: e for e in report["engines"]}
    assert by_name["good"]["reachable"] is True
    assert by_name["hung"]["reachable"] is False
    assert any("/metrics timed out after 1s" in e for e in by_name["hung"]["errors"])
    assert by_name["hung"]["signals"]["health"] == "ok"  # it answers /health; only /metrics hangs
    assert by_name["junk"]["reachable"] is False
    assert any("could not be parsed" in e for e in by_name["junk"]["errors"])
    assert "Traceback" not in err


def test_nothing_readable_exits_3(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, report, err = _diagnose(["--engine", f"hot=http://127.0.0.1:{port}", "--sample", "0.1s"], tmp_path)
    assert code == EXIT_UNUSABLE
    assert report is not None and report["engines"][0]["signals"]["health"] == "unreachable"
    assert "no engine could be read" in err


@pytest.mark.parametrize(("args", "needle"), [
    ([], "name at least one engine"),
    (["--engine", "hot"], "expected NAME=VALUE"),
    (["--engine", "hot=ftp://x"], "must look like http://HOST:PORT"),
    (["--engine", "hot=http://h:1", "--role", "hot=lukewarm"], "the role must be hot or cold"),
    (["--engine", "hot=http://h:1", "--sample", "5 parsecs"], "cannot read duration"),
    (["--engine", "hot=http://h:1", "--since", "15m"], "--since needs --prometheus"),
    (["--engine", "hot=http://h:1", "--log", "cold=/tmp/x"], "no --engine named 'cold'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_flags_exit_3_with_a_message(args: list[str], needle: str, tmp_path: Path) -> None:
    code, report, err = _diagnose(args, tmp_path)
    assert code == EXIT_UNUSABLE and report is None
    assert needle in err


def test_own_timeout_exits_3(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST, "--fault", "slow-metrics:30"]) as hung:
        code, _, err = _diagnose(["--engine", f"hot={hung.url}", "--sample", "0.1s", "--timeout", "1s",
                                  "--request-timeout", "20s"], tmp_path)
    assert code == EXIT_UNUSABLE
    assert "gave up after --timeout 1s" in err


def test_log_events_and_dead_engine(tmp_path: Path) -> None:
    log = tmp_path / "hot.log"
    env = {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
    with engine_thread(["m", *FAST, "--log-file", str(log), "--sim-fault-endpoint"], env=env) as hot:
        httpx.post(hot.url + "/sim/fault", json={"fault": "engine-death"})
        code, report, err = _diagnose(["--engine", f"hot={hot.url}", "--log", f"hot={log}", "--sample", "0.2s"],
                                      tmp_path)
    assert code == EXIT_CRITICAL, err
    assert report is not None and report["status"] == "critical"
    assert report["findings"][0]["playbook"] == "engine_down"
    engine = report["engines"][0]
    assert engine["signals"]["health"] == "unhealthy" and engine["signals"]["health_status"] == 503
    assert any(e["kind"] == "engine_death" for e in engine["events"])


def test_log_file_that_disappears_is_a_clear_note(tmp_path: Path) -> None:
    log = tmp_path / "gone.log"
    with engine_thread(["m", *FAST]) as hot:
        code, report, err = _diagnose(["--engine", f"hot={hot.url}", "--log", f"hot={log}", "--sample", "0.1s"],
                                      tmp_path)
    assert code == EXIT_OK
    assert report is not None
    assert any(str(log) in e for e in report["engines"][0]["errors"])
    assert "Traceback" not in err


def test_gpu_signals_through_dcgm(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST, "--dcgm-port", "0"]) as hot:
        assert hot.handle is not None
        dcgm = f"http://127.0.0.1:{hot.handle.dcgm_port}"
        _, first, _ = _diagnose(["--engine", f"hot={hot.url}", "--dcgm", f"hot={dcgm}", "--sample", "0.1s"],
                                tmp_path)
        code, report, err = _diagnose(["--engine", f"hot={hot.url}", "--dcgm", f"hot={dcgm}", "--sample", "0.1s"],
                                      tmp_path)
    assert code == EXIT_OK, err
    assert report is not None and first is not None
    sig = report["engines"][0]["signals"]
    assert sig["fb_used_ratio"] == pytest.approx(0.92, abs=0.01)
    assert sig["memory_growth_ratio"] == pytest.approx(0.0, abs=0.01)  # the first run recorded the baseline
    assert first["engines"][0]["signals"]["memory_growth_ratio"] is None


def test_fast_path_imports_neither_pandas_nor_textual() -> None:
    code = (
        "import sys, doctor.cli\n"
        "try:\n    doctor.cli.main(['diagnose', '--help'])\nexcept SystemExit:\n    pass\n"
        "import doctor.diagnose, doctor.reading, collectors.combine, collectors.logs, collectors.gpu\n"
        "bad = [m for m in ('pandas', 'textual', 'prometheus_api_client') if m in sys.modules]\n"
        "print('BAD', bad)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert "BAD []" in r.stdout, r.stdout + r.stderr


def test_router_signals_reach_the_hot_engine(tmp_path: Path) -> None:
    from router.config import RouterConfig
    from router.server import router_thread

    with engine_thread(["m", *FAST, "--served-model-name", "hot"]) as hot, \
            engine_thread(["m", *FAST, "--served-model-name", "cold"]) as cold:
        cfg = RouterConfig(hot=[hot.url], cold=[cold.url], policy_file="", port=0)
        with router_thread(cfg) as rt:
            # 6000 one-letter words: 6000 tokens for the engine, but ~3000 by the router's 4-chars estimate,
            # so they go hot although they are long: misrouted.
            answered: list[str] = []

            def send() -> None:  # during the doctor's window
                threading.Event().wait(0.3)
                for _ in range(4):
                    r = httpx.post(rt.url + "/v1/completions", json={"prompt": "a " * 6000, "max_tokens": 2},
                                   timeout=60)
                    answered.append(r.json().get("model", "?"))

            sender = threading.Thread(target=send)
            sender.start()
            _, report, err = _diagnose(["--engine", f"hot={hot.url}", "--engine", f"cold={cold.url}",
                                           "--router", rt.url, "--sample", "3s"], tmp_path)
            sender.join()
    assert answered == ["hot"] * 4
    assert report is not None, err
    sig = {e["name"]: e["signals"] for e in report["engines"]}
    assert sig["hot"]["misrouted_share"] == 1.0
    assert "router_queue_p99_s" in sig["hot"]
