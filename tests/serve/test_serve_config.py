"""The [serve] table: defaults, checks with FILE:LINE errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.config import ConfigError, load_config


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "doctor.toml"
    path.write_text(text)
    return load_config(path)


def test_defaults_are_the_deploy_contract(tmp_path: Path) -> None:
    s = load(tmp_path, "").serve
    assert s.listen == "127.0.0.1:9361" and s.interval_s == 15.0 and s.loopback
    assert s.engine_labels == ("engine", "instance", "job") and s.queue_size == 1000


def test_keys_are_read_with_paths_relative_to_the_config(tmp_path: Path) -> None:
    s = load(tmp_path, '[serve]\nlisten = "0.0.0.0:9000"\ninterval_s = "1s"\ntoken_file = "tok"\n'
                       'queue_size = 5\nengine_labels = ["engine"]\n'
                       '[serve.alert_playbooks]\nMyKvAlert = "kv_pressure"\n').serve
    assert s.port == 9000 and not s.loopback and s.token_file == tmp_path / "tok" and s.interval_s == 1.0
    assert s.alert_playbooks == {"MyKvAlert": "kv_pressure"} and s.engine_labels == ("engine",)


@pytest.mark.parametrize(("text", "says"), [
    ('[serve]\nlisten = "9361"\n', "doctor.toml:2: serve.listen: expected HOST:PORT"),
    ('[serve]\nlisten = "0.0.0.0:9361"\n', "serve.listen: 0.0.0.0:9361 is reachable from other hosts"),
    ('[serve]\n\nintervall_s = 3\n', "doctor.toml:3: serve.intervall_s: unknown key 'intervall_s'; did you mean "
                                     "'interval_s'?"),
    ('[serve]\nqueue_size = 0\n', "serve.queue_size: expected a whole number between 1 and 1000000"),
    ('[serve]\nbasic_auth_user = "am"\n', "basic auth needs both"),
    ('[serve.alert_playbooks]\nX = "kv_presure"\n', "serve.alert_playbooks.X: expected a playbook id, got "
                                                   '"kv_presure" (a string); did you mean \'kv_pressure\'?'),
])
def test_errors_name_the_file_line_and_key(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert says in str(info.value)
