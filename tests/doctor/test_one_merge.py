"""One merge of flags and config (#13): an engine named only by `--engine` is an engine the remediation knows.

Before, `doctor diagnose` merged its flags into the engines it read but built the remediator from the config's
engines alone, so with no config file (or one without [[engines]]) every action on an engine was refused as
"unknown engine 'hot' (configured engines: none)". Run here as `doctor diagnose` parses it, over the efficacy
trial's deployment in virtual time (only I/O substituted: the network, the clock, the wait)."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from pathlib import Path

from doctor.config import DoctorConfig
from doctor.config_merge import merge_flags
from doctor.cycle import run_cycle
from doctor.diagnose import parse_options, plan_of
from doctor.engines import engines_from_flags
from sim.scenarios import get_scenario
from trials import efficacy as eff
from trials.scenario import WARMUP_S
from trials.sim_io import dcgm_url


def test_diagnose_with_flags_alone_acts_on_the_engine_it_names() -> None:
    sc = get_scenario("fragmentation")
    h = eff.EfficacyHarness(seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        d = eff.deploy(h, sc, seed=0, tmp=Path(tmp), gpus=2)
        urls = {e.name: e.url for e in d.config.engines}
        opts = parse_options(["--engine", f"hot={urls['hot']}", "--engine", f"cold={urls['cold']}",
                              "--dcgm", f"hot={dcgm_url('hot')}", "--router", eff.ROUTER_URL, "--fix",
                              "--mode", "auto", "--state-dir", str(Path(tmp) / "flags-state")])
        assert isinstance(opts.settings, DoctorConfig) and not opts.settings.engines  # no config file
        plan = dataclasses.replace(plan_of(opts), transport=d.net.transport(), sync_transport=d.net.sync_transport(),
                                   sleep=d.sleep, processes=d.procs)
        h.run_until(h.start + WARMUP_S)
        t0, actions = h.now, []
        for spec in sc.requests(0):
            d.router.submit(spec, t0 + spec.arrival_s)
        for k in range(1, 21):  # the fragmentation grows past its threshold at about t=400 s
            h.run_until(t0 + 30.0 * k - plan.sample_s)
            actions += asyncio.run(run_cycle(plan, clock=lambda: h.now)).report["actions"]
    on_hot = [a for a in actions if a["target"] == "hot"]
    assert on_hot, actions
    assert not [a for a in on_hot if "unknown engine" in (a["reason"] or "")], on_hot
    assert any(a["action"] == "defragment" and a["status"] in ("applied", "verified") for a in on_hot), on_hot


def test_merge_flags_is_the_merge_diagnose_uses() -> None:
    flags = engines_from_flags(["hot=http://127.0.0.1:1", "extra=http://127.0.0.1:2"], ["extra=cold"])
    config = DoctorConfig(engines=merge_flags(DoctorConfig(), engines_from_flags(["hot=http://127.0.0.1:9"])).engines)
    merged = [e.ref() for e in merge_flags(config, flags).engines]
    assert [(e.name, e.url, e.role) for e in merged] == [("hot", "http://127.0.0.1:1", "hot"),
                                                          ("extra", "http://127.0.0.1:2", "cold")]
