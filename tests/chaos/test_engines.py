"""Chaos: engines that misbehave, each a sim engine process (or a loopback server that misbehaves on purpose) beside
a good one: killed mid-request, accepting and never answering, 5 s late on every scrape, a truncated /metrics,
restarted on its port with counters reset and another bucket layout. The doctor (`doctor diagnose`, a process)
must end by its deadline, report the bad engine with the reason, and still read the good one."""

from __future__ import annotations

import math
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from router.config import RouterConfig
from router.server import RouterThread
from tests.chaos.conftest import Record
from tests.chaos.procs import diagnose, engine_on
from tests.serve.stack import ENGINE, engines, seed_for_state, wait_for
from trials.live import LoadThread, Mix, free_port

pytestmark = pytest.mark.timeout(240)
SHORT = Mix(rate_qps=5.0, long_every=0, short_tokens=100, max_tokens=8)


def _by_name(report: dict) -> dict[str, dict]:
    return {e["name"]: e for e in report["engines"]}


def test_engine_killed_mid_request(tmp_path: Path, outcome: Record) -> None:
    with engines(["hot", "cold"], tmp_path) as eng:
        hot, cold = eng["hot"].url, eng["cold"].url
        r = RouterThread(RouterConfig(hot=[hot], cold=[cold], policy_file="", port=0, health_interval_s=0.5)).start()
        try:
            chunks: list[str] = []
            broke: BaseException | None = None
            with httpx.Client(timeout=httpx.Timeout(60.0), trust_env=False) as client:
                try:
                    with client.stream("POST", r.url + "/v1/completions",
                                       json={"model": "m", "prompt": "a " * 50, "max_tokens": 5000, "stream": True,
                                             "ignore_eos": True}) as resp:
                        assert resp.status_code == 200
                        for line in resp.iter_lines():
                            chunks.append(line)
                            if len(chunks) == 5:
                                eng["hot"].proc.kill()  # SIGKILL, mid-request
                except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                    broke = exc
            assert "data: [DONE]" not in chunks  # cut short, and the client can tell (an error or no [DONE])
            # The router's health checks take the dead engine out; a short prompt fails over to the cold engine.
            def served() -> bool:
                return httpx.post(r.url + "/v1/completions", json={"model": "m", "prompt": "a b", "max_tokens": 4},
                                  timeout=30, trust_env=False).status_code == 200

            wait_for("a request served through the router again", served, timeout_s=60)
        finally:
            r.stop()
        run = diagnose(["--engine", f"hot={hot}", "--engine", f"cold={cold}", "--sample", "0.5s",
                        "--request-timeout", "2s", "--state-dir", str(tmp_path / "state")])
    assert run.code == 2 and run.report is not None, run  # engine_down is critical, the doctor did its job
    by = _by_name(run.report)
    assert by["hot"]["reachable"] is False and by["cold"]["reachable"] is True
    assert [f["engine"] for f in run.report["findings"] if f["playbook"] == "engine_down"] == ["hot"]
    outcome("recovered", f"the client's stream ended short ({type(broke).__name__ if broke else 'no [DONE]'}), "
                         "the router failed over to the cold engine, doctor diagnose: engine_down on hot (critical), "
                         "cold still read", lost=0)


@contextmanager
def silent_listener() -> Iterator[str]:
    """Accepts connections and never answers a byte (an engine wedged below HTTP)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            s.settimeout(0.2)
            while not stop.is_set():
                with suppress(TimeoutError, OSError):
                    held.append(s.accept()[0])

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            yield f"http://127.0.0.1:{s.getsockname()[1]}"
        finally:
            stop.set()
            t.join(5)
            for c in held:
                c.close()


def test_engine_that_accepts_and_never_answers(tmp_path: Path, outcome: Record) -> None:
    with engines(["good"], tmp_path) as eng, silent_listener() as hung:
        run = diagnose(["--engine", f"good={eng['good'].url}", "--engine", f"hung={hung}", "--sample", "0.5s",
                        "--request-timeout", "1s", "--timeout", "60s", "--state-dir", str(tmp_path / "state")])
    assert run.code in (1, 2) and run.report is not None, run
    by = _by_name(run.report)
    assert by["good"]["reachable"] is True and by["good"]["signals"]["health"] == "ok"
    assert by["hung"]["reachable"] is False
    assert any("timed out" in e for e in by["hung"]["errors"]), by["hung"]["errors"]
    assert "engine_down" in [f["playbook"] for f in run.report["findings"] if f["engine"] == "hung"]
    outcome("reported", "every read of it timed out after --request-timeout; engine_down on it, the good engine "
                        "read, the run ended by itself", lost=0)


@pytest.mark.reliability  # two runs of 5 s scrapes: ~25 s, mostly waiting
def test_engine_five_seconds_slow_per_scrape(tmp_path: Path, outcome: Record) -> None:
    (tmp_path / "other").mkdir()  # its own GPU ledger: each engines() call numbers its GPUs from 0
    with engines(["good"], tmp_path) as eng, \
            engines(["slow"], tmp_path / "other", extra=["--fault", "slow-metrics:5"]) as bad:
        args = ["--engine", f"good={eng['good'].url}", "--engine", f"slow={bad['slow'].url}", "--sample", "0.5s",
                "--state-dir", str(tmp_path / "state")]
        patient = diagnose([*args, "--request-timeout", "15s", "--timeout", "60s"])
        hurried = diagnose([*args, "--request-timeout", "2s", "--timeout", "60s", "--no-history"])
    assert patient.report is not None and hurried.report is not None, (patient, hurried)
    assert _by_name(patient.report)["slow"]["reachable"] is True  # read, late, within its request timeout
    slow, good = _by_name(hurried.report)["slow"], _by_name(hurried.report)["good"]
    assert good["reachable"] is True
    assert slow["reachable"] is False and any("/metrics timed out after 2s" in e for e in slow["errors"]), slow
    assert slow["signals"]["health"] == "ok"  # it answers /health: only its scrape is slow
    outcome("reported", "with --request-timeout above 5 s it is read (late); below, it is reported unreadable "
                        "(/metrics timed out) and the good engine is still read", lost=0)


@contextmanager
def truncating_server(scrape: bytes) -> Iterator[dict[str, str]]:
    """Raw HTTP on loopback: /health 200; /metrics at /cut answers a real scrape cut mid-line, at /short a
    Content-Length longer than the body it sends before closing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        s.settimeout(0.2)
        stop = threading.Event()
        port = s.getsockname()[1]

        def answer(c: socket.socket) -> None:
            with c:
                c.settimeout(5)
                head = b""
                with suppress(OSError):
                    while b"\r\n\r\n" not in head:
                        got = c.recv(4096)
                        if not got:
                            return
                        head += got
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
                if path.endswith(b"/health"):
                    c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                elif path.startswith(b"/cut"):
                    body = scrape[: len(scrape) // 2]
                    body = body[: body.rindex(b"\n") + 7]  # ends inside a line
                    c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                              b"connection: close\r\n\r\n%s" % (len(body), body))
                elif path.startswith(b"/short"):
                    c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
                              b"connection: close\r\n\r\n%s" % (len(scrape), scrape[: len(scrape) // 3]))
                else:
                    c.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")

        def serve() -> None:
            while not stop.is_set():
                with suppress(TimeoutError, OSError):
                    c, _ = s.accept()
                    threading.Thread(target=answer, args=(c,), daemon=True).start()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            yield {"cut": f"http://127.0.0.1:{port}/cut", "short": f"http://127.0.0.1:{port}/short"}
        finally:
            stop.set()
            t.join(5)


def test_truncated_metrics_over_http(tmp_path: Path, outcome: Record) -> None:
    with engines(["good"], tmp_path) as eng:
        scrape = httpx.get(eng["good"].url + "/metrics", timeout=10, trust_env=False).content
        with truncating_server(scrape) as urls:
            run = diagnose(["--engine", f"good={eng['good'].url}", "--engine", f"cut={urls['cut']}",
                            "--engine", f"short={urls['short']}", "--sample", "0.5s", "--request-timeout", "3s",
                            "--state-dir", str(tmp_path / "state")])
    assert run.code in (1, 2) and run.report is not None, run
    assert "Traceback" not in run.err
    by = _by_name(run.report)
    assert by["good"]["reachable"] is True
    for name in ("cut", "short"):
        assert by[name]["reachable"] is False, by[name]
        assert by[name]["errors"], by[name]
    assert any("could not be parsed" in e for e in by["cut"]["errors"]), by["cut"]["errors"]
    outcome("reported", f"cut mid-line: {by['cut']['errors'][0][:70]}...; short body: "
                        f"{by['short']['errors'][0][:70]}...; the good engine read", lost=0)


def test_restart_with_counter_reset_and_new_buckets(tmp_path: Path, outcome: Record) -> None:
    """The engine restarts on its port with another --max-model-len (so another prompt/generation-token bucket
    layout) and every counter from zero, between two cron runs whose window spans the restart."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["--engine", f"hot={url}", "--sample", "1s", "--window", "2m", "--state-dir", str(tmp_path / "state")]
    ledger = str(tmp_path / "gpus.json")

    def start(max_model_len: str) -> subprocess.Popen[bytes]:
        proc = engine_on(port, [*ENGINE, "--max-num-seqs", "8", "--max-model-len", max_model_len], gpu=0,
                         ledger=ledger)
        wait_for("the engine", lambda: proc.poll() is None and httpx.get(
            url + "/health", timeout=1, trust_env=False).status_code == 200, timeout_s=60)
        return proc

    runs = []
    bounds = []
    for max_len in ("32768", "8192"):
        proc = start(max_len)
        try:
            load = LoadThread(url, SHORT).start()
            try:
                wait_for("requests finished", lambda: "vllm:request_success_total" in httpx.get(
                    url + "/metrics", timeout=5, trust_env=False).text, timeout_s=60)
                bounds.append({line.split('le="')[1].split('"')[0] for line in httpx.get(
                    url + "/metrics", timeout=5, trust_env=False).text.splitlines()
                    if line.startswith("vllm:request_prompt_tokens_bucket")})
                runs.append(diagnose(args))
            finally:
                load.stop()
        finally:
            proc.kill()  # SIGKILL: no goodbye, the next start begins every counter at zero
            proc.wait(10)
    assert bounds[0] != bounds[1]  # the bucket layout did change
    before, after = (r.report for r in runs)
    assert before is not None and after is not None, runs
    hot = _by_name(after)["hot"]
    assert hot["reachable"] is True and not hot["errors"], hot
    sig = hot["signals"]
    for name in ("qps", "prompt_tokens_per_s", "generation_tokens_per_s"):
        value = sig.get(name)
        assert value is not None and math.isfinite(value) and 0 <= value < 1e6, (name, value)  # never negative
    assert sig["long_prompt_share"] is not None and 0 <= sig["long_prompt_share"] <= 1
    assert hot["window_s"] <= sig["uptime_s"] + 5  # judged since the restart, never across it
    outcome("recovered", f"after the restart the window opened at the restart ({hot['window_s']:g}s, uptime "
                         f"{sig['uptime_s']:.0f}s): rates finite and non-negative (qps {sig['qps']:.1f}), the new "
                         "bucket layout read from the scrape", lost=0)


@pytest.mark.reliability  # a stall is told from a long prefill after a minute without tokens: ~70 s
def test_engine_hung_inside_serving_nothing(tmp_path: Path, outcome: Record) -> None:
    """The sim's `hang` fault: /health stays 200 and /metrics answers, requests are taken and wait, no token comes
    out. Two cron runs a minute apart (the playbook's stall_s) with its `for` already held: engine_stalled, whose
    first remedy relaunches it."""
    with engines(["hot"], tmp_path, extra=["--fault", "hang@0"]) as eng:
        hot = eng["hot"].url

        def ask() -> None:
            with suppress(httpx.HTTPError):
                httpx.post(hot + "/v1/completions", json={"model": "m", "prompt": "a b", "max_tokens": 4},
                           timeout=600, trust_env=False)  # a client that gave up would count as an abort

        waiting = [threading.Thread(target=ask, daemon=True) for _ in range(3)]
        for t in waiting:
            t.start()
        wait_for("requests waiting on the hung engine", lambda: "vllm:num_requests" in (text := httpx.get(
            hot + "/metrics", timeout=5, trust_env=False).text) and any(
            line.split(" ")[-1] not in ("0", "0.0") for line in text.splitlines()
            if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))), timeout_s=30)
        args = ["--engine", f"hot={hot}", "--sample", "1s", "--window", "3m", "--state-dir", str(tmp_path / "state")]
        first = diagnose(args)
        assert first.report is not None and not [f for f in first.report["findings"]
                                                 if f["playbook"] == "engine_stalled"], first  # a second is no hang
        time.sleep(65)  # the minute without a token that tells a hang from a long prefill
        seed_for_state(tmp_path / "state", "engine_stalled|hot", held_s=100)  # its `for` (30 s) held already
        run = diagnose(args)
    assert run.report is not None, run
    [e] = run.report["engines"]
    assert e["reachable"] is True and e["signals"]["health"] == "ok"
    stalled = [f for f in run.report["findings"] if f["playbook"] == "engine_stalled"]
    assert stalled and stalled[0]["remedies"][0]["action"] == "relaunch", (run.report["findings"],
                                                                            run.report["pending"], e["signals"])
    outcome("reported", f"health ok, requests waiting, no tokens: engine_stalled ({stalled[0]['summary'][:80]}), "
                        "first remedy: relaunch", lost=0)
