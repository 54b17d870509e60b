"""`doctor advise --checklist` against the sim deployment `make demo` runs (doctor.demo: its engines' arguments, its
router, its doctor.toml), over real HTTP on loopback: every item has a verdict and a source, and the verdicts this
deployment makes knowable are the ones given (a host without NVML is "could not check", never "pass")."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from doctor.advise.cli import main
from doctor.demo import COLD, HOT, TOKEN, demo_config
from router.config import RouterConfig
from router.server import router_thread
from sim.gpu import MemoryLedger
from sim.testing import engine_thread


class NoNvml:
    """A host without a GPU driver: NVML's calls fail as pynvml's do there."""

    @staticmethod
    def nvmlSystemGetCudaDriverVersion() -> int:
        raise OSError("NVML Shared Library Not Found")


@pytest.mark.parametrize("nvml", [None, NoNvml()], ids=["this-host", "no-nvml"])
def test_checklist_against_the_demo_deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml: object
                                               ) -> None:
    monkeypatch.setenv("DEMO_ROUTER_TOKEN", TOKEN)
    ledger = MemoryLedger()
    with engine_thread(HOT, ledger=ledger) as hot, \
            engine_thread(COLD, env={"CUDA_VISIBLE_DEVICES": "1"}, ledger=ledger) as cold, \
            router_thread(RouterConfig(hot=[hot.url], cold=[cold.url], policy_file="", port=0), token=TOKEN) as rt:
        config = tmp_path / "doctor.toml"
        config.write_text(demo_config(tmp_path, rt.url, hot.url, cold.url))
        out, err = io.StringIO(), io.StringIO()
        code = main(["--config", str(config), "--checklist", "--format", "json"], out=out, err=err, nvml=nvml)
        text = io.StringIO()
        main(["--config", str(config), "--checklist"], out=text, err=err, nvml=nvml)
    doc = json.loads(out.getvalue())
    items = {i["id"]: i for i in doc["items"]}
    assert set(items) == {"cuda", "fragmentation", "fairness_window", "route_threshold", "alert_rules",
                          "misroute_alert", "quantization_ab", "warmup", "latency_heatmap"}
    assert all(i["verdict"] in ("pass", "fail", "ask", "unknown") and i["source"].strip() for i in items.values())
    verdicts = {k: i["verdict"] for k, i in items.items()}
    if nvml is not None or "no NVML" in items["cuda"]["source"]:
        assert verdicts["cuda"] == "unknown" and "could not check" in items["cuda"]["source"]
    assert verdicts["fairness_window"] == "pass" and "fairness_window 10" in items["fairness_window"]["source"]
    assert verdicts["route_threshold"] == "pass" and "route_threshold_tokens 5120" in items["route_threshold"]["source"]
    assert verdicts["fragmentation"] == "unknown" and "no signal history" in items["fragmentation"]["source"]
    # the demo configures no Prometheus: its rules cannot be checked (and are not passed)
    assert verdicts["alert_rules"] == verdicts["misroute_alert"] == "unknown"
    assert "no Prometheus configured" in items["alert_rules"]["source"]
    # the demo's engines do not run in dev mode: /server_info is not served, quantization cannot be read
    assert verdicts["quantization_ab"] == "unknown" and "VLLM_SERVER_DEV_MODE" in items["quantization_ab"]["source"]
    assert verdicts["warmup"] == "fail" and verdicts["latency_heatmap"] == "unknown"
    assert code == 1 and doc["failed"] == 1 and doc["status"] == "fail"
    rendered = text.getvalue()
    assert all(i["source"] in rendered for i in items.values()) and "1 failed" in rendered
