"""`doctor advise --checklist` against a sim deployment: hot and cold sim engines, the router's policy document,
a Prometheus rules API holding the shipped rules, NVML and the signal history. Only I/O is substituted."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import httpx

from collectors.history import SignalHistory
from doctor.advise.checklist import expected_rules
from doctor.advise.cli import main
from router.policy import Policy
from sim.server_info import config_json, server_info_body
from trials.scenario import ScenarioHarness
from trials.sim_io import SimNetwork, engine_url


class FakeNvml:
    """NVML as a CUDA 12.4 driver answers it."""

    @staticmethod
    def nvmlSystemGetCudaDriverVersion() -> int:
        return 12040


def test_checklist_items_with_verdicts_and_sources(tmp_path: Path) -> None:
    h = ScenarioHarness()
    net = SimNetwork(h)
    for gpu, name in enumerate(("hot", "cold")):
        quant = ["--quantization", "fp8"] if name == "cold" else []
        h.add_engine(name, ["m", "--preset", "h100-8b", *quant], env={"CUDA_VISIBLE_DEVICES": str(gpu)})
        net.register(engine_url(name), name)
    # cold runs in dev mode: its /server_info, as the sim's HTTP server answers it (the harness network has none)
    cold = h.engines["cold"].core
    body = server_info_body(cold.profile, cold.preset, "", config_json(cold), "json", {})
    net.serve(engine_url("cold"), lambda r: httpx.Response(200, json=body) if r.url.path == "/server_info"
              else httpx.Response(404))
    net.serve("http://router.sim", lambda r: httpx.Response(200, json=Policy(route_threshold_tokens=4096).to_dict()))
    rules = [{"name": n, "type": "alerting"} for n in expected_rules()]
    net.serve("http://prom.sim", lambda r: httpx.Response(200, json={"status": "success", "data": {"groups": [
        {"name": "serving-doctor", "rules": rules}]}}))
    SignalHistory(tmp_path / "history.jsonl").append_many(time.time(), {"hot": {"memory_growth_ratio": 0.04},
                                                                   "cold": {"memory_growth_ratio": 0.21}})
    (tmp_path / "doctor.toml").write_text("\n".join([
        "[doctor]", f'state_dir = "{tmp_path}"', "[router]", 'url = "http://router.sim"',
        "[prometheus]", 'url = "http://prom.sim"', "[templates]", 'prompts = ["You are a support agent."]',
        *(line for n in ("hot", "cold") for line in ("[[engines]]", f'name = "{n}"', f'url = "{engine_url(n)}"'))]))
    out = io.StringIO()
    code = main(["--config", str(tmp_path / "doctor.toml"), "--checklist", "--format", "json"], out=out,
                err=io.StringIO(), sync_transport=net.sync_transport(), nvml=FakeNvml())
    doc = json.loads(out.getvalue())
    got = {i["id"]: (i["verdict"], i["source"]) for i in doc["items"]}
    assert got["cuda"][0] == "pass" and "CUDA 12.4" in got["cuda"][1]
    assert got["fragmentation"][0] == "fail" and "cold 21.0%" in got["fragmentation"][1]
    assert got["fairness_window"][0] == "pass"
    assert "route_threshold_tokens 4096" in got["route_threshold"][1] and "5120" in got["route_threshold"][1]
    assert got["alert_rules"][0] == "pass" and got["misroute_alert"][0] == "pass"
    assert got["quantization_ab"][0] == "ask" and "cold fp8" in got["quantization_ab"][1]  # evidence, not a guess
    assert "hot: /server_info not readable" in got["quantization_ab"][1]
    assert got["warmup"][0] == "pass" and got["latency_heatmap"][0] == "unknown"
    assert all(source for _, source in got.values())
    assert code == 1 and doc["failed"] == 1  # the fragmented cold engine


def test_checklist_without_sources_says_why(tmp_path: Path) -> None:
    (tmp_path / "doctor.toml").write_text(f'[doctor]\nstate_dir = "{tmp_path}"\n[[engines]]\nname = "hot"\n'
                                          f'url = "{engine_url("hot")}"\n')
    net = SimNetwork(ScenarioHarness())  # nothing answers
    out = io.StringIO()
    code = main(["--config", str(tmp_path / "doctor.toml"), "--checklist"], out=out, err=io.StringIO(),
                sync_transport=net.sync_transport())
    text = out.getvalue()
    assert "no router configured" in text and "no Prometheus configured" in text and "no signal history" in text
    assert code == 1  # no [templates]: the warm-up item fails
