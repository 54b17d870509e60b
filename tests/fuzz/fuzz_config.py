"""doctor.toml as `doctor diagnose --config` and `doctor serve` load it. Contract: a DoctorConfig, or
ConfigError naming the file (never RecursionError, OverflowError or any other exception)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from doctor.config import load_config
from doctor.config_schema import ConfigError

_PATH = Path(tempfile.mkdtemp(prefix="fuzz-config-")) / "doctor.toml"


def fuzz_one(data: bytes) -> None:
    _PATH.write_bytes(data)
    try:
        cfg = load_config(_PATH)
    except ConfigError as exc:
        assert str(exc).startswith(os.fspath(_PATH)), exc
        return
    assert 0 < cfg.timeout_s <= 86400 and 0 <= cfg.hourly_action_budget <= 1000
