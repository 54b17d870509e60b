"""The fleet settings: [prometheus] discover, [doctor] max_concurrent_reads, and diagnose's --discover."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from doctor.config import load_config
from doctor.config_schema import ConfigError
from doctor.diagnose import UsageError, main, parse_options


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "doctor.toml"
    path.write_text(text)
    return load_config(path)


def test_discover_and_the_bound_from_the_config(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '[doctor]\nmax_concurrent_reads = 200\n[prometheus]\nurl = "http://p:9090"\n'
                          'discover = { job = "vllm", team = "serving" }\n')
    assert dict(cfg.prometheus_discover) == {"job": "vllm", "team": "serving"}
    assert cfg.max_concurrent_reads == 200
    default = _load(tmp_path, "")
    assert (dict(default.prometheus_discover), default.max_concurrent_reads) == ({}, 64)


@pytest.mark.parametrize(("text", "message"), [
    ('[prometheus]\ndiscover = { job = "vllm" }\n', r"prometheus\.discover: needs \[prometheus\] url"),
    ('[prometheus]\nurl = "http://p:9090"\ndiscover = { job = 3 }\n', r"prometheus\.discover\.job: expected"),
    ('[prometheus]\nurl = "http://p:9090"\ndiscover = "vllm"\n', r"prometheus\.discover: expected a table"),
    ("[doctor]\nmax_concurrent_reads = 0\n", r"doctor\.max_concurrent_reads"),
])
def test_bad_fleet_settings_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text)


def test_discover_flag(tmp_path: Path) -> None:
    config = tmp_path / "doctor.toml"
    config.write_text('[doctor]\nmax_concurrent_reads = 16\n[prometheus]\nurl = "http://p:9090"\n'
                      'discover = { job = "vllm" }\n')
    opts = parse_options(["--config", str(config), "--discover", "team=serving", "--since", "1h"])
    assert opts.engines == [] and opts.discover == {"job": "vllm", "team": "serving"}
    assert opts.max_concurrent_reads == 16
    assert parse_options(["--prometheus", "http://p:9090", "--discover", "job=vllm"]).discover == {"job": "vllm"}
    with pytest.raises(UsageError, match="--discover needs --prometheus"):
        parse_options(["--discover", "job=vllm"])
    with pytest.raises(UsageError, match="--discover 'vllm': expected LABEL=VALUE"):
        parse_options(["--prometheus", "http://p:9090", "--discover", "vllm"])
    with pytest.raises(UsageError, match="name at least one engine"):
        parse_options(["--prometheus", "http://p:9090"])


def test_unreachable_prometheus_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, err = io.StringIO(), io.StringIO()
    code = main(["--prometheus", f"http://127.0.0.1:{port}", "--discover", "job=vllm", "--since", "5m",
                 "--state-dir", str(tmp_path), "--timeout", "20s"], out=out, err=err)
    assert code == 3, err.getvalue()
    assert f"cannot discover engines: Prometheus at http://127.0.0.1:{port}: cannot list targets (ConnectError" \
        in err.getvalue()
    assert "Traceback" not in err.getvalue()
