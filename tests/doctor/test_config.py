"""doctor.toml: the shipped example loads, and every kind of mistake names the file, the key path and the line."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from doctor.config import DoctorConfig, load_config
from doctor.config_merge import merge_flags
from doctor.config_schema import ConfigError, line_index
from doctor.engines import engines_from_flags
from doctor.pipeline import PlaybookSettings
from playbooks import registry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "doctor.toml"

BASE = """\
[[engines]]
name = "hot"
url = "http://127.0.0.1:8001"

[[engines]]
name = "cold"
url = "http://127.0.0.1:8002"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doctor.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.file == str(path)
    assert str(err).startswith(str(path))
    assert err.__suppress_context__ or err.__context__ is None  # no chained traceback
    return err


# ---------------------------------------------------------------- the example


def test_example_loads_with_the_seed_values() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.mode == "observe" and cfg.timeout_s == 30 and cfg.verify_s == 120 and cfg.cooldown_s == 900
    assert cfg.length_limit_lift_after_s == 600
    assert (cfg.long_prompt_tokens, cfg.very_long_prompt_tokens) == (5120, 8192)
    assert cfg.hourly_action_budget == 6 and cfg.fleet_breaker_ratio == 0.5
    assert cfg.kill_switch_file == Path("/var/lib/serving-doctor/kill-switch")
    hot, cold = cfg.engines
    assert (hot.name, hot.role, hot.url, hot.gpus) == ("hot", "hot", "http://127.0.0.1:8001", (0,))
    assert (hot.max_num_seqs, hot.max_num_batched_tokens, hot.gpu_memory_utilization) == (8, 5120, 0.85)
    assert (cold.role, cold.max_num_seqs, cold.max_model_len) == ("cold", 2, 32768)
    assert cfg.slo_for("hot") == {"p99_ttft_s": 0.5, "p99_e2e_s": 2.0, "p95_itl_s": 0.05}
    assert cfg.slo_for("cold")["p99_ttft_s"] == 1.5 and cfg.slo_for("nobody") == {}
    assert cfg.templates.variations == 20 and cfg.templates_configured("hot") and not cfg.templates_configured("cold")
    assert cfg.mode_for("engine_down") == "approve" and cfg.mode_for("kv_pressure") == "observe"
    assert not cfg.playbook_enabled("replica_imbalance", "hot")
    assert not cfg.playbook_enabled("prefix_cache_miss", "cold") and cfg.playbook_enabled("prefix_cache_miss", "hot")
    assert cfg.router.url == "http://127.0.0.1:8080" and cfg.router.token({"ROUTER_POLICY_TOKEN": "s3"}) == "s3"
    assert cfg.escalation.alertmanager_url == "http://127.0.0.1:9093" and cfg.prometheus_url
    assert (cfg.bounds.batch_timeout_min_ms, cfg.bounds.batch_timeout_max_ms) == (50, 200)
    assert cfg.bounds.tensor_parallel_max == 2
    assert cfg.in_maintenance(datetime(2025, 6, 7, 3, 0, tzinfo=UTC))  # a Saturday
    assert not cfg.in_maintenance(datetime(2025, 6, 8, 3, 0, tzinfo=UTC))
    refs = cfg.engine_refs()
    assert [r.name for r in refs] == ["hot", "cold"]
    assert refs[0].config == {"max_num_seqs": 8, "max_num_batched_tokens": 5120, "max_model_len": 8192,
                              "gpu_memory_utilization": 0.85}  # no longer dropped on the way to the remediator
    assert refs[0].log == "/var/log/vllm/hot.log" and refs[0].launcher == hot.launcher
    cmd = hot.launch_command("/tmp/state", max_num_seqs=6)
    assert cmd.startswith("CUDA_VISIBLE_DEVICES=0 vllm serve") and "--port 8001" in cmd
    assert "--max-num-seqs 6 " in cmd and "--tensor-parallel-size 1 " in cmd and "{" not in cmd


def test_config_is_playbook_settings() -> None:
    settings: PlaybookSettings = load_config(EXAMPLE)
    assert settings.params_for("engine_down", "hot") == {}
    defaults: PlaybookSettings = DoctorConfig()
    assert defaults.playbook_enabled("kv_pressure", "x") and defaults.params_for("kv_pressure", "x") == {}
    assert DoctorConfig().mode_for("kv_pressure") == "observe"


def test_params_for_merges_global_then_engine_overrides(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BASE + """
        [engines.thresholds.kv_pressure]
        kv_usage_ratio = 0.9

        [thresholds.kv_pressure]
        kv_usage_ratio = 0.8
        waiting = 2
        """))
    assert cfg.params_for("kv_pressure", "hot") == {"kv_usage_ratio": 0.8, "waiting": 2.0}
    assert cfg.params_for("kv_pressure", "cold") == {"kv_usage_ratio": 0.9, "waiting": 2.0}
    assert cfg.params_for("engine_down", "cold") == {}


def test_durations_as_text_and_numbers(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """
        [doctor]
        timeout_s = "5m"
        sample_s = 2.5
        cooldown_s = "1h30m"
        length_limit_lift_after_s = "0"

        [[engines]]
        name = "hot"
        url = "http://127.0.0.1:8001/"
        slo = { p99_ttft_s = "750ms", p99_e2e_s = 3 }
        """))
    assert (cfg.timeout_s, cfg.sample_s, cfg.cooldown_s) == (300.0, 2.5, 5400.0)
    assert cfg.length_limit_lift_after_s == 0.0  # never lift early: keep the limit until it expires
    assert cfg.slo_for("hot") == {"p99_ttft_s": 0.75, "p99_e2e_s": 3.0}
    assert cfg.engines[0].url == "http://127.0.0.1:8001"


def test_relative_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BASE + 'log = "logs/cold.log"\n[doctor]\nstate_dir = "state"\n'))
    assert cfg.state_dir == tmp_path / "state" and cfg.engines[1].log == str(tmp_path / "logs" / "cold.log")
    assert cfg.kill_switch_path(tmp_path / "state") == tmp_path / "state" / "kill-switch"


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, ""))
    assert cfg.engines == () and cfg.mode == "observe" and cfg.path == tmp_path / "doctor.toml"


# ---------------------------------------------------------------- bad configs


def test_toml_syntax_error_has_the_line(tmp_path: Path) -> None:
    err = error(tmp_path, "[doctor]\nmode = \"observe\"\ntimeout_s = \n")
    assert err.line == 3 and "doctor.toml:3: TOML syntax error, column" in str(err)


def test_unknown_top_level_key_suggests(tmp_path: Path) -> None:
    err = error(tmp_path, BASE + "\n[enginez]\nx = 1\n")
    assert err.key == "enginez" and err.line == 9
    assert "unknown key 'enginez'; did you mean 'engines'?" in str(err) and "allowed here: doctor, engines" in str(err)


def test_unknown_nested_key_suggests(tmp_path: Path) -> None:
    err = error(tmp_path, BASE + "\n[engines.slo]\np99_ttft_s = 1\np99_e2e = 2\n")
    assert str(err) == (f"{tmp_path / 'doctor.toml'}:11: engines[1].slo.p99_e2e: unknown key 'p99_e2e'; did you "
                        "mean 'p99_e2e_s'? (allowed here: p99_ttft_s, p99_e2e_s, p95_ttft_s, p95_itl_s)")


def test_wrong_type(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace('name = "cold"', 'name = "cold"\nmax_num_seqs = "8"'))
    assert err.key == "engines[1].max_num_seqs" and err.line == 7
    assert 'expected a whole number between 1 and 1000000, got "8" (a string)' in str(err)
    err = error(tmp_path, "[doctor]\nlong_prompt_tokens = 5120.5\n")
    assert err.key == "doctor.long_prompt_tokens" and "(a number)" in str(err)
    err = error(tmp_path, "doctor = 3\n")
    assert err.key == "doctor" and "expected a table" in str(err)


def test_out_of_range_ratio_names_the_engine_threshold(tmp_path: Path) -> None:
    err = error(tmp_path, BASE + "\n[engines.thresholds.kv_pressure]\nkv_usage_ratio = 1.5\n")
    assert str(err) == (f"{tmp_path / 'doctor.toml'}:10: engines[1].thresholds.kv_pressure.kv_usage_ratio: "
                        "expected a number between 0 and 1, got 1.5")
    err = error(tmp_path, "[doctor]\nfleet_breaker_ratio = 50\n")
    assert err.key == "doctor.fleet_breaker_ratio" and "between 0 and 1" in str(err)


def test_bad_duration(tmp_path: Path) -> None:
    err = error(tmp_path, "[doctor]\ntimeout_s = \"5 minutes\"\n")
    assert err.key == "doctor.timeout_s" and err.line == 2
    assert "write it like 500ms, 5s, 15m, 1h or 1h30m" in str(err)
    err = error(tmp_path, "[doctor]\nsample_s = 0\n")
    assert "above zero" in str(err)


def test_bad_role_and_mode(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace('name = "cold"', 'name = "cold"\nrole = "warm"'))
    assert err.key == "engines[1].role" and 'expected one of hot, cold, got "warm" (a string)' in str(err)
    err = error(tmp_path, "[doctor]\nmode = \"dryrun\"\n")
    assert "expected one of observe, dry-run, approve, auto" in str(err) and "did you mean 'dry-run'?" in str(err)


def test_unknown_playbook_id(tmp_path: Path) -> None:
    err = error(tmp_path, "[thresholds.kv_presure]\nkv_usage_ratio = 0.8\n")
    assert err.key == "thresholds.kv_presure" and err.line == 1
    assert "unknown playbook id 'kv_presure'; did you mean 'kv_pressure'?" in str(err) and "engine_down" in str(err)
    err = error(tmp_path, "[playbooks.nope]\nenabled = false\n")
    assert err.key == "playbooks.nope" and "unknown playbook id" in str(err)
    err = error(tmp_path, BASE + "[engines.playbooks.enginedown]\nenabled = false\n")
    assert err.key == "engines[1].playbooks.enginedown" and "did you mean 'engine_down'?" in str(err)


def test_unknown_threshold_param(tmp_path: Path) -> None:
    err = error(tmp_path, "[thresholds.kv_pressure]\nkv_usage = 0.8\n")
    assert err.key == "thresholds.kv_pressure.kv_usage" and err.line == 2
    assert "did you mean 'kv_usage_ratio'?" in str(err) and "critical_kv_usage_ratio" in str(err)
    err = error(tmp_path, "[thresholds.engine_down]\nx = 1\n")
    assert "has no thresholds to set" in str(err)


def test_playbook_module_not_loadable_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "PLAYBOOK_MODULES", (*registry.PLAYBOOK_MODULES, "not_written_yet"))
    err = error(tmp_path, "[thresholds.not_written_yet]\nx = 1\n")
    assert err.key == "thresholds.not_written_yet" and "cannot be loaded (ModuleNotFoundError" in str(err)


def test_duplicate_engine_name(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace('"cold"', '"hot"'))
    assert err.key == "engines[1].name" and err.line == 6
    assert "engine name 'hot' is already used by engines[0]" in str(err)


def test_bad_urls(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace("http://127.0.0.1:8002", "127.0.0.1:8002"))
    assert err.key == "engines[1].url" and err.line == 7 and "expected a URL like http://HOST:PORT" in str(err)
    err = error(tmp_path, BASE.replace("http://127.0.0.1:8002", "http://127.0.0.1:80x2"))
    assert "bad port" in str(err)
    err = error(tmp_path, "[escalation]\nwebhook_url = \"ftp://example.com\"\n")
    assert err.key == "escalation.webhook_url"
    err = error(tmp_path, '[[engines]]\nname = "hot"\n')
    assert err.key == "engines[0]" and err.line == 1 and "missing required key 'url'" in str(err)


def test_other_cross_checks(tmp_path: Path) -> None:
    err = error(tmp_path, "[doctor]\nvery_long_prompt_tokens = 100\n")
    assert "must be >= long_prompt_tokens (5120)" in str(err)
    err = error(tmp_path, "[bounds]\nbatch_timeout_min_ms = 300\n")
    assert err.key == "bounds.batch_timeout_min_ms" and "<= batch_timeout_max_ms (200)" in str(err)
    err = error(tmp_path, BASE + '[templates]\nprompts = ["hi"]\nengines = ["hto"]\n')
    assert err.key == "templates.engines" and "did you mean 'hot'?" in str(err)
    err = error(tmp_path, BASE + 'gpus = [0, "1"]\n')
    assert err.key == "engines[1].gpus" and "item 1" in str(err)
    err = error(tmp_path, BASE + 'log = "a.log"\nlog_command = ["journalctl"]\n')
    assert "not both" in str(err)
    err = error(tmp_path, BASE.replace('"cold"', '"cold one"'))
    assert err.key == "engines[1].name"


def test_launcher_template_is_checked(tmp_path: Path) -> None:
    launcher = 'launcher = "vllm serve m --port {prot} --max-num-seqs {max_num_seqs}"\n'
    err = error(tmp_path, BASE + "max_num_seqs = 2\n" + launcher)
    assert err.key == "engines[1].launcher" and "unknown placeholder {prot}; did you mean 'port'?" in str(err)
    err = error(tmp_path, BASE + 'launcher = "vllm serve m --max-model-len {max_model_len}"\n')
    assert "sets no 'max_model_len'" in str(err)
    err = error(tmp_path, BASE + "launcher = \"vllm serve 'm --port {port}\"\n")
    assert "cannot read the command template" in str(err)


def test_maintenance_windows(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """
        [[maintenance]]
        days = ["Friday", "sat"]
        start = "22:00"
        end = "02:00"

        [[maintenance]]
        start = 12:00:00
        end = "12:30"
        timezone = "Europe/Berlin"
        """))
    fri_late, sat_early, sun_early = (datetime(2025, 6, d, h, 30, tzinfo=UTC) for d, h in ((6, 23), (7, 1), (9, 1)))
    night = cfg.maintenance[0]
    assert night.contains(fri_late) and night.contains(sat_early) and not night.contains(sun_early)
    assert not night.contains(datetime(2025, 6, 5, 23, 0, tzinfo=UTC))  # Thursday
    assert cfg.in_maintenance(datetime(2025, 6, 4, 10, 15, tzinfo=UTC))  # 12:15 in Berlin (summer time)
    assert not cfg.in_maintenance(datetime(2025, 6, 4, 12, 15, tzinfo=UTC))
    err = error(tmp_path, '[[maintenance]]\nstart = "2am"\nend = "04:00"\n')
    assert err.key == "maintenance[0].start" and err.line == 2 and '"02:00"' in str(err)
    err = error(tmp_path, '[[maintenance]]\nstart = "1:00"\nend = "2:00"\n[[maintenance]]\ndays = ["Caturday"]\n')
    assert err.key == "maintenance[1].days" and err.line == 5
    err = error(tmp_path, '[[maintenance]]\nstart = "01:00"\nend = "02:00"\ntimezone = "Mars/Olympus"\n')
    assert "unknown time zone" in str(err)


def test_missing_file_and_bad_encoding(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml")
    path = tmp_path / "doctor.toml"
    path.write_bytes(b"[doctor]\nmode = \"\xff\"\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


# ---------------------------------------------------------------- flags and the line index


def test_merge_flags_overrides_and_extends_by_name() -> None:
    cfg = load_config(EXAMPLE)
    flags = engines_from_flags(["hot=http://10.0.0.5:9001", "extra=http://10.0.0.6:9001"], ["extra=cold"])
    merged = merge_flags(cfg, flags)
    assert [e.name for e in merged.engines] == ["hot", "cold", "extra"]
    hot = merged.engine("hot")
    assert hot is not None and hot.url == "http://10.0.0.5:9001" and hot.role == "hot"
    assert hot.slo == cfg.engines[0].slo and hot.log == "/var/log/vllm/hot.log" and hot.max_num_seqs == 8
    extra = merged.engine("extra")
    assert extra is not None and extra.role == "cold" and merged.slo_for("extra") == {}
    only_flags = merge_flags(DoctorConfig(), engines_from_flags(["hot=http://127.0.0.1:1"]))
    assert [r.name for r in only_flags.engine_refs()] == ["hot"]


def test_line_index_follows_arrays_inline_tables_and_multiline_strings() -> None:
    text = textwrap.dedent('''\
        [[engines]]
        name = "a"
        launcher = """x \\
        fake = 1
        """
        [engines.slo]
        p99_e2e_s = 1
        [[engines]]
        "quoted.key" = 1
        thresholds.kv_pressure.waiting = 3
        ''')
    idx = line_index(text)
    assert idx[("engines",)] == 1 and idx[("engines", 0)] == 1 and idx[("engines", 0, "launcher")] == 3
    assert ("engines", 0, "fake") not in idx and ("fake",) not in idx
    assert idx[("engines", 0, "slo", "p99_e2e_s")] == 7 and idx[("engines", 1)] == 8
    assert idx[("engines", 1, "quoted.key")] == 9
    assert idx[("engines", 1, "thresholds", "kv_pressure", "waiting")] == 10


def test_ray_and_kubernetes_launchers_for_one_deployment_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "d.toml"
    cfg.write_text('[launcher]\nbackend = "ray"\n[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:8000"\n'
                   '[engines.kubernetes]\ndeployment = "vllm-hot"\n')
    with pytest.raises(ConfigError, match=r"launcher.backend.*not both"):
        load_config(cfg)
