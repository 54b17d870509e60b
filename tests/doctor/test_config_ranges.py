"""Absurd config values and hostile shapes: a clear ConfigError naming the key, the value and the allowed range
(never a RecursionError or a silent 10^29), and `doctor diagnose --config` exits 3 with it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from doctor.config import load_config
from doctor.config_schema import ConfigError
from doctor.diagnose import EXIT_UNUSABLE, main

ENGINE = '[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:8001"\n'


def _error(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "doctor.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(str(path))
    return info.value


@pytest.mark.parametrize("text", [
    "a = " + "[" * 5000 + "]" * 5000 + "\n",
    "a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n",
])
def test_deeply_nested_toml_is_a_clear_error(tmp_path: Path, text: str) -> None:
    err = _error(tmp_path, text)
    assert "nested too deeply" in str(err)


def test_deeply_nested_toml_exits_3_through_diagnose(tmp_path: Path) -> None:
    path = tmp_path / "doctor.toml"
    path.write_text(ENGINE + "x = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = main(["--config", str(path), "--state-dir", str(tmp_path / "s")], out=out, err=err)
    assert code == EXIT_UNUSABLE
    assert str(path) in err.getvalue() and "nested too deeply" in err.getvalue()
    assert "Traceback" not in err.getvalue() and "RecursionError" not in err.getvalue()


@pytest.mark.parametrize(("text", "key", "value", "allowed"), [
    ("[doctor]\nhourly_action_budget = 100000000000000000000000000000\n", "doctor.hourly_action_budget",
     "100000000000000000000000000000", "between 0 and 1000"),
    ("[doctor]\ntimeout_s = 1e300\n", "doctor.timeout_s", "1e+300", "up to 24h"),
    ("[doctor]\ntimeout_s = \"inf\"\n", "doctor.timeout_s", '"inf"', "up to 24h"),
    ("[doctor]\nrequest_timeout_s = \"2h\"\n", "doctor.request_timeout_s", '"2h"', "up to 1h"),
    ("[doctor]\ncooldown_s = 1e40\n", "doctor.cooldown_s", "1e+40", "up to 720h"),
    ("[doctor]\nsample_s = -5\n", "doctor.sample_s", "-5", "must not be negative"),
    ("[doctor]\nlong_prompt_tokens = 1000000000000\n", "doctor.long_prompt_tokens", "1000000000000",
     "between 1 and 100000000"),
    ("[doctor]\nfleet_breaker_ratio = 1.5\n", "doctor.fleet_breaker_ratio", "1.5", "between 0 and 1"),
    ("[serve]\nlisten = \"127.0.0.1:70000\"\n", "serve.listen", "127.0.0.1:70000", "HOST:PORT"),
    ("[serve]\ninterval_s = 1e300\n", "serve.interval_s", "1e+300", "up to 720h"),
    ('[router]\nurl = "http://127.0.0.1:99999"\n', "router.url", "99999", "bad port"),
    (ENGINE + "max_num_seqs = 10000000000\n", "engines[0].max_num_seqs", "10000000000", "between 1 and 1000000"),
    (ENGINE + "gpus = [0, 99999]\n", "engines[0].gpus", "99999", "between 0 and 1023"),
    ("[thresholds.engine_stalled]\nstall_s = 1e300\n", "thresholds.engine_stalled.stall_s", "1e+300", "up to 720h"),
    ("[thresholds.kv_pressure]\nkv_usage_ratio = 7\n", "thresholds.kv_pressure.kv_usage_ratio", "7",
     "between 0 and 1"),
    ("[notify]\ntimeout_s = 1e300\n", "notify.timeout_s", "1e+300", "up to 720h"),
])
def test_absurd_values_name_key_value_and_range(tmp_path: Path, text: str, key: str, value: str,
                                                allowed: str) -> None:
    err = _error(tmp_path, text)
    assert err.key == key, str(err)
    assert value in str(err) and allowed in str(err), str(err)


def test_sensible_values_still_load(tmp_path: Path) -> None:
    path = tmp_path / "doctor.toml"
    path.write_text("[doctor]\nhourly_action_budget = 1000\ntimeout_s = \"24h\"\ncooldown_s = \"30d\"\n"
                    "long_prompt_tokens = 100000000\nvery_long_prompt_tokens = 100000000\n"
                    "[thresholds.engine_stalled]\nstall_s = 600\n" + ENGINE + "gpus = [0, 1023]\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.hourly_action_budget == 1000 and cfg.timeout_s == 86400.0 and cfg.cooldown_s == 30 * 86400.0
