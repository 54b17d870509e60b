"""`doctor advise --prometheus URL --since 150s`: the window read from a real Prometheus server's history. A sim ground
truth runs 150 s in virtual time; its /metrics text every 5 s is backfilled into Prometheus (Debian's, on loopback;
`promtool tsdb create-blocks-from openmetrics`) as the scrapes of one target, and the advice read through Prometheus
sees the workload the engine's own reads show (requests, rate, lengths), and fits the twin to it."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import time
from pathlib import Path

import jsonschema
from prometheus_client.parser import text_string_to_metric_families

from collectors.scrape import parse_metrics
from collectors.types import EngineConfigView
from collectors.window import window_view
from doctor.advise.cli import main
from doctor.advise.workload import profile_of
from sim.workload import WorkloadSpec, generate
from tests.advise.simtruth import truth_argv
from tests.collectors.conftest import run_prometheus
from trials.scenario import ScenarioHarness

WINDOW_S = 150.0
EVERY_S = 5.0
INSTANCE = "127.0.0.2:1"  # the engine's URL host:port: its series' `instance` label (never dialled here)
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "advise.schema.json").read_text())


def _openmetrics(texts: list[tuple[float, str]], path: Path) -> None:
    """Every series of the scrapes in OpenMetrics with timestamps (seconds), one name's series together."""
    series: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for t, text in texts:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name.endswith("_created") or math.isnan(s.value):
                    continue
                labels = {**s.labels, "instance": INSTANCE, "job": "vllm"}
                key = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
                series.setdefault(s.name, {}).setdefault(key, []).append((t, s.value))
    with path.open("w") as out:
        for name, by_labels in series.items():
            for key, points in by_labels.items():
                out.write("".join(f"{name}{{{key}}} {v!r} {t:.3f}\n" for t, v in points))
        out.write("# EOF\n")


def test_advise_reads_its_window_from_prometheus(tmp_path: Path) -> None:
    h = ScenarioHarness(seed=5)
    h.add_engine("gt", truth_argv())
    h.engines["gt"].core.seen_batch_classes.update(1 << i for i in range(21))
    h.load(generate(WorkloadSpec(rate_qps=2.0, duration_s=60 + WINDOW_S + 30, seed=3)))
    h.run_for(60.0)
    end = float(int(time.time()) - 30)  # the window's last scrape, half a minute ago
    t0, texts = h.now, []
    while True:
        texts.append((end - WINDOW_S + (h.now - t0), h.metrics_text("gt")))
        if h.now - t0 >= WINDOW_S - 1e-9:
            break
        h.run_for(EVERY_S)
    direct = [parse_metrics(text, t) for t, text in texts]
    _openmetrics(texts, tmp_path / "gt.om")
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    proc = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(tmp_path / "gt.om"),
                           str(tmp_path / "data")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = tmp_path / "doctor.toml"
    config.write_text(f'[[engines]]\nname = "gt"\nurl = "http://{INSTANCE}"\nmax_num_seqs = 16\n'
                      "max_num_batched_tokens = 2048\n")
    with run_prometheus(tmp_path, [], scrape_configs="  - job_name: none\n    static_configs: []\n") as prom:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--config", str(config), "--prometheus", prom.url, "--since", f"{WINDOW_S:g}s", "--every",
                     f"{EVERY_S:g}s", "--format", "json", "--max-num-seqs-grid", "16", "--batched-tokens-grid",
                     "2048", "--chunked-grid", "on", "--min-requests", "100"],
                    out=out, err=err, clock=lambda: end + 1.0)
        bad = io.StringIO()
        assert main(["--engine", "gt=http://127.0.0.2:1", "--since", "5m"], out=io.StringIO(), err=bad) == 3
        assert "--since needs --prometheus" in bad.getvalue()
    assert out.getvalue(), err.getvalue()
    doc = json.loads(out.getvalue())
    jsonschema.validate(doc, SCHEMA)
    (e,) = doc["engines"]
    assert "error" not in e, e.get("error")
    told = EngineConfigView(max_num_seqs=16, max_num_batched_tokens=2048)
    want = profile_of("gt", None, window_view(direct), direct, told).to_dict()
    got = e["workload"]
    print(json.dumps({"prometheus": got, "direct": want, "fit": e["fit"]["errors"]}, indent=1))
    assert got["requests"] == want["requests"] and got["requests"] >= 250
    for k in ("rate_qps", "avg_prompt_tokens", "avg_generation_tokens", "window_s"):
        assert math.isclose(got[k], float(want[k]), rel_tol=0.02), (k, got[k], want[k])  # type: ignore[arg-type]
    assert e["fit"] is not None and all(v is None or math.isfinite(v) for v in e["fit"]["errors"].values())
    assert code in (0, 1), err.getvalue()
