"""`doctor rules`: the committed rules file is the generator's output, promtool accepts it, and its unit tests pass."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from collectors.names import PROFILE_NAMES
from doctor.rules import DEFAULT_OUT, build, load_playbooks, main, render
from doctor.rules_table import NO_RULE, RULES, SLO_SIGNALS, Options
from playbooks.registry import PLAYBOOK_MODULES

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / DEFAULT_OUT
RULES_TEST = ROOT / "deploy" / "prometheus" / "rules_test.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
REGENERATE = ".venv/bin/python -m doctor.rules --out deploy/prometheus/rules.yml"
# Alerts a rule raises that its playbook's `alerts` does not list yet (the playbook should add them).
UNLISTED_ALERTS: set[str] = set()


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if path is None:
        pytest.fail("promtool is not installed: run `make test` (scripts/ensure-debian-packages.sh installs Debian's "
                    "prometheus package, which ships promtool)")
    return path


def _promtool(promtool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def _generate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_committed_rules_are_the_generators_output() -> None:
    playbooks, missing = load_playbooks()
    assert RULES_FILE.read_text() == render(Options(), playbooks, missing), \
        f"{DEFAULT_OUT} is stale: regenerate it with `{REGENERATE}` and commit it"


def test_promtool_checks_the_committed_rules(promtool: str) -> None:
    result = _promtool(promtool, "check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"SUCCESS: \d+ rules found", result.stdout)


def test_promtool_unit_tests_pass(promtool: str) -> None:
    result = _promtool(promtool, "test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_every_profile_and_option_generates_valid_rules(promtool: str, tmp_path: Path, profile: str) -> None:
    out = tmp_path / "rules.yml"
    code, _, err = _generate("--profile", profile, "--spelling", "colon", "--max-num-seqs", "256",
                             "--cold-selector", 'job="vllm", role="cold"', "--gpu-selector", 'job="dcgm"',
                             *[a for k in SLO_SIGNALS for a in ("--slo", f"{k}=1s")], "--out", str(out))
    assert code == 0, err
    result = _promtool(promtool, "check", "rules", str(out))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_names_a_registered_playbook_and_its_alert() -> None:
    playbooks, _ = load_playbooks()
    opts = Options(slo={k: 1.0 for k in SLO_SIGNALS}, max_num_seqs=256)
    rules, _ = build(opts, playbooks)
    assert {r.playbook for r in rules} | set(NO_RULE) == set(PLAYBOOK_MODULES)
    for rule in rules:
        assert rule.playbook in PLAYBOOK_MODULES
        pb = playbooks.get(rule.playbook)
        if pb is not None:
            assert rule.alert in pb.alerts or rule.alert in UNLISTED_ALERTS, \
                f"rule {rule.alert} is not among {rule.playbook}'s alerts {pb.alerts}"
    text = RULES_FILE.read_text()
    labels = re.findall(r"^ {10}playbook: (\w+)$", text, re.M)
    assert labels and set(labels) <= set(PLAYBOOK_MODULES)
    assert len(labels) == len(re.findall(r"^ {6}- alert: ", text, re.M))
    assert len(re.findall(r"^ {10}severity: (critical|warning|info)$", text, re.M)) == len(labels)


def test_thresholds_use_the_playbooks_parameter_names() -> None:
    playbooks, _ = load_playbooks()
    for spec in RULES:
        pb = playbooks.get(spec.playbook)
        if pb is not None:
            unknown = set(spec.params) - set(pb.defaults)
            assert not unknown, f"{spec.alert} reads {sorted(unknown)}, not in {spec.playbook}'s defaults"


def test_thresholds_and_for_come_from_the_playbook() -> None:
    playbooks, _ = load_playbooks()
    kv = playbooks["kv_pressure"]
    rules, _ = build(Options(), {**playbooks, "kv_pressure": kv})
    rule = next(r for r in rules if r.playbook == "kv_pressure")
    assert rule.for_s == kv.for_s == 300.0
    assert f"> {kv.defaults['kv_usage_ratio']:g}" in rule.expr
    text = RULES_FILE.read_text()
    block = text[text.index("- alert: VllmKvCachePressure"):].split("- alert:")[1]
    assert "for: 5m" in block and "severity: warning" in block


def test_runbook_urls_resolve_to_runbook_anchors() -> None:
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', RUNBOOKS.read_text()))
    urls = re.findall(r'runbook_url: "docs/runbooks\.md#([\w-]+)"', RULES_FILE.read_text())
    assert urls and set(urls) <= anchors


def test_preemptions_use_the_total_counter() -> None:
    text = RULES_FILE.read_text()
    assert "num_preemptions_total" in text
    assert not re.search(r"num_preemptions(\{|\[|\"\})", text)  # vLLM's example rule's name matches nothing


def test_seed_cold_path_alert_maps_to_cold_prefill_slow() -> None:
    text = _generate("--cold-selector", 'role="cold"')[1]
    block = text[text.index("- alert: PrefillLatencyHigh"):].split("- alert:")[1]
    assert 'histogram_quantile(0.99, sum by (le, job, instance) (rate({__name__=~"vllm[:_]request_prefill_time_' \
           'seconds_bucket", role="cold"}[5m]))) > 1.5' in block
    assert "for: 5m" in block and "playbook: cold_prefill_slow" in block


def test_explained_gaps_are_comments() -> None:
    text = RULES_FILE.read_text()
    header = text.split("groups:")[0]
    assert "cuda_oom: no rule" in header and "--max-num-seqs" in header and "--slo p99_ttft_s" in header
    with_seqs = _generate("--max-num-seqs", "128")[1]
    assert "- alert: VllmBatchUnderutilized" in with_seqs and "/ 128 < 0.65" in with_seqs


def test_slo_rule_fires_over_the_slo(promtool: str, tmp_path: Path) -> None:
    code, _, err = _generate("--slo", "p99_ttft_s=500ms", "--out", str(tmp_path / "rules.yml"))
    assert code == 0, err
    bucket = 'vllm:time_to_first_token_seconds_bucket{{job="vllm", instance="{i}", engine="0", le="{le}"}}'
    series = [(bucket.format(i="slow:8000", le="0.5"), "0x10"), (bucket.format(i="slow:8000", le="1.0"), "0+10x10"),
              (bucket.format(i="slow:8000", le="+Inf"), "0+10x10"),
              (bucket.format(i="fast:8000", le="0.5"), "0+10x10"), (bucket.format(i="fast:8000", le="+Inf"), "0+10x10")]
    lines = ["rule_files: [rules.yml]", "evaluation_interval: 1m", "tests:", "  - interval: 1m", "    input_series:"]
    lines += [f"      - series: '{s}'\n        values: '{v}'" for s, v in series]
    lines += ["    alert_rule_test:", "      - eval_time: 1m", "        alertname: VllmTtftSloBreach",
              "        exp_alerts: []", "      - eval_time: 3m", "        alertname: VllmTtftSloBreach",
              "        exp_alerts:", "          - exp_labels: {severity: critical, playbook: p99_spike, job: vllm, "
              'instance: "slow:8000"}', "            exp_annotations:",
              '              summary: "vLLM engine slow:8000: TTFT over SLO"',
              '              description: "Time to first token is 995ms, over its SLO."',
              '              runbook_url: "docs/runbooks.md#p99-spike"']
    (tmp_path / "t.yml").write_text("\n".join(lines) + "\n")
    result = _promtool(promtool, "test", "rules", "t.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_options_shape_the_queries() -> None:
    text = _generate("--spelling", "colon", "--selector", '{job="llm", cluster="a"}', "--window", "2m",
                     "--by", "job,instance,model_name")[1]
    assert 'max by (job, instance, model_name) (vllm:kv_cache_usage_perc{job="llm", cluster="a"}) > 0.75' in text
    assert "[2m]" in text and "[5m]" not in text and "__name__" not in text
    hot = _generate("--hot-selector", 'role="hot"')[1]
    jitter = hot[hot.index("- alert: VllmHotDecodeJitter"):].split("- alert:")[1]
    assert 'role="hot"' in jitter and 'job="vllm"' not in jitter
    base = _generate("--runbook-base", "https://example.org/r/blob/main/")[1]
    assert 'runbook_url: "https://example.org/r/blob/main/docs/runbooks.md#engine-down"' in base


@pytest.mark.parametrize("argv", [["--profile", "9.9"], ["--window", "5"], ["--slo", "p99_ttft=1"],
                                  ["--slo", "p99_ttft_s=soon"], ["--max-num-seqs", "0"], ["--by", "instance"],
                                  ["--bogus"], ["--selector", "up{job='x'}"]])
def test_bad_options_exit_3_with_a_message(argv: list[str]) -> None:
    code, out, err = _generate(*argv)
    assert code == 3 and out == ""
    assert err.startswith("doctor rules: ") and "Traceback" not in err


def test_unwritable_out_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = _generate("--out", str(tmp_path / "missing" / "rules.yml"))
    assert code == 3 and "cannot write" in err


def test_stdout_is_the_rendered_text() -> None:
    code, out, _ = _generate()
    assert code == 0 and out == RULES_FILE.read_text()
