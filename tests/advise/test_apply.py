"""Issue 18, `doctor advise --apply` on a sim engine as ground truth, with real processes: the engine is a `doctor sim
engine` process the launcher started (a step-time scale the advisor is not told), behind the real router, under
generated traffic; `doctor advise --apply` fits the twin, applies its recommendation through the remediation path
(auto mode, guardrails, the launcher's blue/green relaunch onto the spare GPU, the router swapped), reads the new
engine under the same traffic and records the prediction error in the audit log.

make test runs a smoke (10 s windows: the path works end to end, the error is finite and audited; no bound, 100
requests make a noisy P99). `make advise-apply` (ADVISE_APPLY_FULL=1) runs 120 s windows and asserts must-show #1's
second half: the change lands within 20% of the twin's prediction (P99 TTFT, P99 e2e, throughput) for the traffic
that came after it (the twin replaying the after window's workload); the prediction made at advice time, for the
traffic before, is printed beside it (the two windows' traffic differs by chance: 15% more arrivals in one run)."""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import psutil

from doctor.advise.cli import main
from doctor.remedy.audit import AuditLog
from doctor.remedy.launcher import LocalLauncher, free_port
from doctor.remedy.model import EngineTarget
from router.config import RouterConfig
from router.server import router_thread
from sim.loadgen import run_load
from sim.workload import WorkloadSpec, generate

FULL = os.environ.get("ADVISE_APPLY_FULL", "") not in ("", "0")
WINDOW_S = float(os.environ.get("ADVISE_APPLY_WINDOW_S", "120" if FULL else "10"))
RATE = float(os.environ.get("ADVISE_APPLY_RATE", "8"))
TOLD_SEQS = 8  # tight for the traffic: a longer TTFT tail than at 16
HIDDEN_SCALE = os.environ.get("ADVISE_APPLY_SCALE", "0.4")  # not told to the advisor: a faster GPU than the preset
TOKEN = "advise-apply-token"
SLO = {"p99_ttft_s": 0.5, "p99_e2e_s": 10.0}
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "advise.schema.json").read_text())
GRAPHED = "--compilation-config '{{\"max_cudagraph_capture_size\": 1048576}}'"  # no eager step pays a cold start


def template(ledger: Path) -> str:
    return (f"{sys.executable} -m doctor.cli sim engine m --host 127.0.0.1 --port {{port}} --preset a100-13b "
            f"--time-scale {HIDDEN_SCALE} --sim-startup-scale 0 {GRAPHED} --max-num-seqs {{max_num_seqs}} "
            "--max-num-batched-tokens {max_num_batched_tokens} --max-model-len 4096 --served-model-name m "
            f"--gpu-ledger {ledger}")


@dataclass
class Stack:
    config: Path
    state: Path
    router_url: str
    old_pid: int


@contextmanager
def stack(tmp: Path) -> Iterator[Stack]:
    state = tmp / "state"
    launcher = LocalLauncher(state, health_timeout_s=60.0)
    port = free_port("127.0.0.1")
    target = EngineTarget("hot", "hot", f"http://127.0.0.1:{port}", launcher=template(tmp / "gpus.json"), gpus=(0,),
                          max_model_len=4096, args={"max_num_seqs": TOLD_SEQS, "max_num_batched_tokens": 2048})
    old = launcher.start(target, port=port, gpus=[0], args={})
    try:
        asyncio.run(launcher.wait_healthy(old))
        cfg = RouterConfig(hot=[target.url], cold=[], port=0, policy_file="", health_interval_s=0.5,
                           route_threshold_tokens=4000)
        with router_thread(cfg, token=TOKEN) as rt:
            token = tmp / "router-token"
            token.write_text(TOKEN)
            token.chmod(0o600)
            config = tmp / "doctor.toml"
            config.write_text("\n".join([
                "[doctor]", f'state_dir = "{state}"', 'mode = "auto"',
                "[router]", f'url = "{rt.url}"', f'token_file = "{token}"',
                "[bounds]", "gpu_pool = [0, 1]",
                "[[engines]]", 'name = "hot"', 'role = "hot"', f'url = "{target.url}"', "gpus = [0]",
                f"max_num_seqs = {TOLD_SEQS}", "max_num_batched_tokens = 2048", "max_model_len = 4096",
                f"launcher = '''{target.launcher}'''",
                "[engines.slo]", *(f'{k} = "{v}s"' for k, v in SLO.items())]) + "\n")
            yield Stack(config, state, rt.url, old.pid)
    finally:
        for rec in LocalLauncher(state).adopt():
            asyncio.run(launcher.stop(rec))


@contextmanager
def traffic(url: str, duration_s: float) -> Iterator[list[object]]:
    """Poisson arrivals at RATE, chat-like lengths, through the router, until the block ends."""
    requests = generate(WorkloadSpec(rate_qps=RATE, duration_s=duration_s, seed=1, prompt_median=300,
                                     output_median=50, prompt_cap=2000, output_cap=400))
    results: list[object] = []
    loop = asyncio.new_event_loop()
    task: list[asyncio.Task[object]] = []

    def go() -> None:
        async def body() -> object:
            return await run_load(url, requests, model="m", stream=False, timeout_s=120)

        task.append(loop.create_task(body()))
        with suppress(asyncio.CancelledError):
            results.append(loop.run_until_complete(task[0]))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    try:
        yield results
    finally:
        loop.call_soon_threadsafe(lambda: task and task[0].cancel())
        t.join(30)
        loop.close()


def cmdline(pid: int) -> str:
    return " ".join(psutil.Process(pid).cmdline())


def test_advise_apply_relaunches_and_measures_its_prediction(tmp_path: Path) -> None:
    with stack(tmp_path) as s, traffic(s.router_url, 4 * WINDOW_S + 120):
        time.sleep(5.0)  # the traffic reaches its steady state before the window opens
        out, err = io.StringIO(), io.StringIO()
        # The smoke's 10 s window (~80 requests) fits less tightly than 25%: it checks the path, not the bound. The
        # sim engine keeps wall-clock time, so on a machine loaded by the rest of the suite its latencies drift from
        # the twin's (85% on P50 TTFT seen, which withheld the advice): the smoke lets any finite fit through.
        code = main(["--config", str(s.config), "--sample", f"{WINDOW_S:g}s", "--every", "1s", "--format", "json",
                     "--apply", "--settle", "3s", "--min-requests", "50", "--max-num-seqs-grid", "8,16,32",
                     "--batched-tokens-grid", "2048", "--chunked-grid", "on",
                     *([] if FULL else ["--max-fit-error", "99"])], out=out, err=err)
        assert out.getvalue(), err.getvalue()
        doc = json.loads(out.getvalue())
        jsonschema.validate(doc, SCHEMA)
        (e,) = doc["engines"]
        print(json.dumps({k: e.get(k) for k in ("fit", "recommendation", "applied")}, indent=1))
        assert code == 0, (e.get("withheld"), e.get("error"), e.get("applied"))
        a = e["applied"]
        assert e["recommendation"]["change"] and a["status"] == "verified", a
        new_seqs = e["recommendation"]["max_num_seqs"]
        assert a["params"]["max_num_seqs"] == new_seqs != TOLD_SEQS
        assert any("blue/green" in step for step in a["steps"]), a["steps"]
        (rec,) = LocalLauncher(s.state).adopt()  # the old engine is stopped, the new one runs the advice
        assert rec.pid != s.old_pid and f"--max-num-seqs {new_seqs}" in cmdline(rec.pid)
        p = a["prediction"]
        # 10 s of Poisson arrivals at 8 req/s vary by ~11% (one sd) between windows: like-for-like is asserted on 60 s
        assert p["checked"] and p["traffic_ratio"] is not None and math.isfinite(p["traffic_ratio"]), p
        assert p["same_traffic"] or not FULL, p
        errors = {m: p["errors"][m] for m in ("p99_ttft_s", "p99_e2e_s", "qps")}
        assert all(v is not None and math.isfinite(v) for v in errors.values()), errors
        (line,) = [x for x in AuditLog(s.state / "audit.jsonl").events(a["id"]) if x["event"] == "prediction_checked"]
        assert line["errors"] == p["errors"] and line["measured"] == p["measured"]
        events = [x["event"] for x in AuditLog(s.state / "audit.jsonl").events(a["id"])]
        assert events[:3] == ["begin", "applied", "verified"], events
        replayed = {m: p["replayed"]["errors"][m] for m in ("p99_ttft_s", "p99_e2e_s", "qps")}
        assert all(v is not None and math.isfinite(v) for v in replayed.values()), p["replayed"]
        print("prediction errors after", a["params"], "as predicted at advice time:", errors, "the twin replaying the "
              "traffic that came after:", replayed, "requests", p["requests"], "traffic ratio", p["traffic_ratio"])
        if FULL:  # the twin's error, told apart from how the traffic itself moved between the two windows
            for m, v in replayed.items():
                assert v <= 0.20, f"prediction error on {m}: {v:.1%} (replayed {p['replayed']['predicted'][m]}, " \
                                  f"measured {p['measured'][m]}; as predicted at advice time {p['predicted'][m]})"
