"""The doctor.toml a running scenario writes beside its logs, for `doctor tui --config` / `doctor diagnose --config`.

A scenario's default baseline is short (sim.scenario_cli: 90 s), shorter than the playbooks' baselines look
back (the hour before the last 10 minutes), so no baseline is known during the run. Each expected playbook
still has a way to decide without one, and this config gives it: SLOs for `p99_spike` (the demo's: P99 TTFT
2 s hot, 8 s cold; healthy traffic stays far under them), the configured templates for `prefix_cache_miss`,
the engines' limits for the sequence-cap playbooks. `cold_start` falls back to its absolute 2 s TTFT and
`memory_fragmentation` measures growth from the doctor's first reading, so neither needs more. Observe mode:
the scenario has no router and no launcher, so there is nothing the doctor could change. Checked in the trials'
virtual-time harness with this config at the 90 s baseline: every incident scenario's expected finding and first
remedy within its `max_delay_s`, and no false alarm (tests/sim/test_scenario_cli.py runs two of them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from sim.args import parse_engine_args
from sim.scenarios import Scenario
from sim.workload import RequestSpec
from sim.workload_prompts import prompt_text

SLO_TTFT_S = {"hot": 2.0, "cold": 8.0}  # P99 TTFT SLOs, as `doctor demo` sets them


def _q(value: object) -> str:
    return json.dumps(str(value))  # a TOML basic string is a JSON string


def templates(sc: Scenario, seed: int = 0) -> list[str]:
    """The prompt templates the scenario's requests share (their text, as the engines see it)."""
    w = sc.workload
    if not sc.templates_on or not w.n_templates:
        return []
    return [prompt_text(RequestSpec(-1, 0.0, w.template_tokens, 1, False, prefix_group=g,
                                    prefix_tokens=w.template_tokens), seed) for g in range(w.n_templates)]


def doctor_toml(sc: Scenario, urls: Mapping[str, str], dcgm: Mapping[str, str], logs: Mapping[str, Path], *,
                state_dir: Path, seed: int = 0) -> str:
    """The config text for the scenario's two engines at `urls`."""
    out = ["# written by `doctor sim scenario`: the running scenario's engines, SLOs and templates",
           "[doctor]", f"state_dir = {_q(state_dir)}", 'mode = "observe"', 'sample_s = "2s"',
           f"long_prompt_tokens = {sc.route_threshold}", ""]
    for e in sc.engines:
        config, _ = parse_engine_args([*sc.argv_for(e.name, seed)], env=dict(e.env))
        out += ["[[engines]]", f"name = {_q(e.name)}", f"role = {_q(e.role)}", f"url = {_q(urls[e.name])}",
                f"log = {_q(logs[e.name])}", f"dcgm = {_q(dcgm[e.name])}",
                f"max_num_seqs = {config.max_num_seqs}", f"max_model_len = {config.max_model_len}"]
        if config.max_num_batched_tokens is not None:
            out.append(f"max_num_batched_tokens = {config.max_num_batched_tokens}")
        out += ["", "[engines.slo]", f'p99_ttft_s = "{SLO_TTFT_S.get(e.role, 8.0):g}s"', ""]
    prompts = templates(sc, seed)
    if prompts:
        out += ["[templates]", "prompts = [" + ", ".join(_q(p) for p in prompts) + "]",
                "engines = [" + ", ".join(_q(n) for n in sc.templates_on) + "]", ""]
    out += ["[playbooks.replica_imbalance]", "enabled = false  # one hot and one cold engine are not replicas", ""]
    return "\n".join(out)
