"""`doctor sim scenario`'s baseline: by default the incident comes within two minutes, `--baseline 600` gives the
long form, bad values are usage errors; the catalogue the accuracy trials run stays as it is. Checked on the
scenario's own data (timeline, phases, schedule, requests), never on a clock."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.config import load_config
from sim.scenario_cli import DEFAULT_BASELINE_S, build_parser, main
from sim.scenario_config import doctor_toml
from sim.scenarios import SCENARIOS, Scenario
from sim.timeline_file import expected_of, scenario_phases, write_timeline

INCIDENTS = [n for n, sc in SCENARIOS.items() if sc.onset_s is not None]
ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str]) -> Scenario:
    """The scenario `doctor sim scenario ARGV` would play (the parser's and main's own choice)."""
    ns = build_parser().parse_args(argv)
    return SCENARIOS[ns.name].with_baseline(ns.baseline)


def _events(sc: Scenario) -> list[float]:
    """When anything of the incident happens: timeline entries played at run time, phases, schedule steps."""
    return ([i.at_s for i in sc.timeline if i.kind != "standing"] + [p.start_s for p in sc.phases]
            + [t for t, _, _ in sc.workload.schedule])


@pytest.mark.parametrize("name", INCIDENTS)
def test_the_default_reaches_the_incident_within_two_minutes(name: str) -> None:
    sc = _run([name])
    assert sc.onset_s is not None and sc.onset_s <= 120
    assert min(_events(sc), default=sc.onset_s) <= 120
    assert all(t <= 120 for t in _events(sc)), _events(sc)
    # what follows the incident is kept: the same time after the onset, the same ground truth
    long = SCENARIOS[name]
    assert long.onset_s is not None
    assert sc.duration_s - sc.onset_s == pytest.approx(long.duration_s - long.onset_s)
    assert (sc.expected_playbook, sc.expected_remedy, sc.expected_engine) == \
        (long.expected_playbook, long.expected_remedy, long.expected_engine)
    assert [i.kind for i in sc.timeline] == [i.kind for i in long.timeline]


@pytest.mark.parametrize("name", INCIDENTS)
def test_baseline_600_restores_the_long_form(name: str) -> None:
    sc = _run([name, "--baseline", "600"])
    long = SCENARIOS[name]
    assert long.onset_s is not None
    assert sc.onset_s == 600
    shift = 600 - long.onset_s
    assert sorted(_events(sc)) == pytest.approx(sorted(max(0.0, t + shift) for t in _events(long)))


def test_the_traffic_is_the_scenario_s_moved_to_the_new_onset() -> None:
    """long_prompt_storm: no 9K+ prompt before the incident, the storm right after it, in both forms."""
    for baseline in (90.0, 600.0):
        sc = SCENARIOS["long_prompt_storm"].with_baseline(baseline)
        storm = [r for r in sc.requests(0) if r.prompt_tokens >= 9000]
        assert storm and min(r.arrival_s for r in storm) >= baseline
        assert min(r.arrival_s for r in storm) < baseline + 30
    # a base workload that stops at the incident stops at the new one (prefix_cache_collapse's old templates)
    sc = SCENARIOS["prefix_cache_collapse"].with_baseline(90)
    old = [r for r in sc.requests(0) if r.prefix_group is not None and r.prefix_group < 1000]
    assert old and max(r.arrival_s for r in old) < 90


def test_a_standing_fault_is_rescaled_to_reach_its_threshold_at_the_new_onset() -> None:
    long, short = SCENARIOS["fragmentation"], SCENARIOS["fragmentation"].with_baseline(90)
    rate = {sc.name + str(sc.onset_s): float(sc.timeline[0].spec.split(":")[1]) for sc in (long, short)}
    assert long.onset_s is not None and short.onset_s == 90
    # growth since the first reading (t=30 s) at the onset is the same share in both
    assert rate[f"fragmentation{long.onset_s}"] * (long.onset_s - 30) == pytest.approx(
        rate["fragmentation90"] * (90 - 30), rel=1e-3)
    assert f"fragmentation:{short.timeline[0].spec.split(':')[1]}" in short.hot_argv
    # growing six times faster, the engine gets room for all of it (else an OOM comes before the finding)
    util = short.hot_argv[short.hot_argv.index("--gpu-memory-utilization") + 1]
    assert float(util) * 1.6 < 1 and "8192" in short.hot_argv
    def others(argv: tuple[str, ...]) -> list[str]:
        return [a for a in argv if not a.startswith("fragmentation:")]

    assert others(long.with_baseline(600).hot_argv) == others(long.hot_argv)  # the long form: only the rate moves


def test_the_catalogue_the_trials_run_is_unchanged() -> None:
    before = {n: dataclasses.asdict(sc) for n, sc in SCENARIOS.items()}
    for sc in SCENARIOS.values():
        sc.with_baseline(DEFAULT_BASELINE_S)
    assert {n: dataclasses.asdict(sc) for n, sc in SCENARIOS.items()} == before
    assert SCENARIOS["long_prompt_storm"].onset_s == 660 and SCENARIOS["engine_hang"].onset_s == 290
    healthy = SCENARIOS["healthy"]
    assert healthy.with_baseline(90) is healthy  # no incident, nothing to move


@pytest.mark.parametrize(("value", "says"), [("-5", "at least 60"), ("abc", "expected a number of seconds"),
                                             ("inf", "at least 60"), ("nan", "at least 60"), ("10", "at least 60")])
def test_bad_baselines_are_usage_errors(value: str, says: str) -> None:
    err = io.StringIO()
    assert main(["engine_hang", "--baseline", value], err=err) == 2
    assert "--baseline" in err.getvalue() and says in err.getvalue(), err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_a_bad_baseline_exits_2_without_a_traceback_from_the_command_line() -> None:
    r = subprocess.run([sys.executable, "-m", "doctor.cli", "sim", "scenario", "engine_hang", "--baseline", "-1"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "--baseline" in r.stderr and "Traceback" not in r.stderr


def test_list_shows_the_default_and_the_asked_onsets() -> None:
    out = io.StringIO()
    assert main(["--list"], out=out) == 0
    assert "engine_hang" in out.getvalue() and "incident at t=90s" in out.getvalue()
    out = io.StringIO()
    assert main(["--list", "--baseline", "600"], out=out) == 0
    assert "incident at t=600s" in out.getvalue() and "incident at t=90s" not in out.getvalue()


@pytest.mark.parametrize("name", INCIDENTS)
def test_the_written_doctor_config_loads_and_declares_what_detection_without_a_baseline_needs(
        name: str, tmp_path: Path) -> None:
    sc = _run([name])
    urls = {"hot": "http://127.0.0.1:18001", "cold": "http://127.0.0.1:18002"}
    dcgm = {"hot": "http://127.0.0.1:18003/metrics", "cold": "http://127.0.0.1:18004/metrics"}
    text = doctor_toml(sc, urls, dcgm, {k: tmp_path / f"{k}.log" for k in urls}, state_dir=tmp_path / "state")
    (tmp_path / "doctor.toml").write_text(text)
    config = load_config(tmp_path / "doctor.toml")
    assert [(e.name, e.url) for e in config.engines] == list(urls.items())
    # p99_spike judges on SLOs where no baseline is known yet
    assert config.slo_for("hot")["p99_ttft_s"] == 2.0 and config.slo_for("cold")["p99_ttft_s"] == 8.0
    for e in sc.templates_on:
        assert config.templates_configured(e)  # prefix_cache_miss only judges engines with templates
    assert config.engine("hot") is not None and config.engine("hot").max_num_seqs == 16  # type: ignore[union-attr]


def test_the_timeline_file_says_the_phases(tmp_path: Path) -> None:
    sc = _run(["long_prompt_storm"])
    path = tmp_path / "timeline.json"
    write_timeline(path, name=sc.name, description=sc.description, started_at=1000.0, phases=scenario_phases(sc),
                   end_s=sc.duration_s, expected=expected_of(sc))
    doc = json.loads(path.read_text())
    assert doc["started_at"] == 1000.0 and doc["scenario"] == "long_prompt_storm"
    assert [(p["name"], p["at_s"]) for p in doc["phases"]] == [("baseline", 0.0), ("incident", 90.0)]
    assert "9K-16K-token" in doc["phases"][1]["note"] and doc["expected"] == "p99_spike on cold -> length_limit"


@pytest.mark.parametrize("name", ["long_prompt_storm", "fragmentation"])
def test_at_the_default_baseline_the_doctor_still_detects_with_the_written_config(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the trials' virtual-time harness, judged with the doctor.toml the CLI writes instead of the trials' own
    settings: p99_spike has no baseline yet and decides on the SLO; the rescaled fragmentation reaches its
    threshold without the engine running out of memory first."""
    import trials.accuracy as accuracy
    from trials.sim_io import dcgm_url, engine_url

    sc = _run([name])
    names = [e.name for e in sc.engines]
    (tmp_path / "doctor.toml").write_text(doctor_toml(
        sc, {n: engine_url(n) for n in names}, {n: dcgm_url(n) for n in names},
        {n: tmp_path / f"{n}.log" for n in names}, state_dir=tmp_path / "state"))
    config = load_config(tmp_path / "doctor.toml")
    monkeypatch.setattr(accuracy, "ScenarioSettings", lambda templates_on: config)
    result = accuracy.run_in_harness(sc, seed=0)
    assert result.detection_delay_s is not None and result.detection_delay_s <= sc.max_delay_s, result.timeline()
    assert result.first_remedy == sc.expected_remedy
    assert result.false_positives == []


def test_the_description_says_the_run_s_onset() -> None:
    assert "hangs at t=90s" in _run(["engine_hang"]).description
    assert "hangs at t=290s" in SCENARIOS["engine_hang"].description
