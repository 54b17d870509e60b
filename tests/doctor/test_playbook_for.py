"""[playbooks.<id>] for_s: the config sets how long a playbook's condition must hold before it is reported (what
`doctor demo --for` shortens); the registered playbook and every other playbook keep their own `for`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from collectors.types import Signals
from doctor.config import ConfigError, load_config
from doctor.pipeline import run_playbooks
from playbooks.base import EngineView
from playbooks.long_prompt_share import PLAYBOOK


def _view(now: float) -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values={"long_prompt_share": 0.47})
    return EngineView(name="hot", role="hot", signals=sig, params=dict(PLAYBOOK.defaults), now=now)


def _fired(config_text: str, tmp_path: Path, held_s: float) -> list[str]:
    (tmp_path / "doctor.toml").write_text(config_text)
    config = load_config(tmp_path / "doctor.toml")
    state: dict[str, dict[str, Any]] = {}
    findings = []
    for now in (1000.0, 1000.0 + held_s):
        findings = run_playbooks([replace(_view(now), now=now)], state, now=now, settings=config)
    return [f"{f.playbook}:{f.for_s:g}" for f in findings]


def test_a_configured_for_reports_the_finding_sooner(tmp_path: Path) -> None:
    assert PLAYBOOK.for_s == 60
    assert _fired("", tmp_path, 20) == []  # its own 60 s `for` has not passed
    assert _fired('[playbooks.long_prompt_share]\nfor_s = "15s"\n', tmp_path, 20) == ["long_prompt_share:15"]
    assert PLAYBOOK.for_s == 60  # the registered playbook is untouched
    # another playbook's `for` does not change this one's
    assert _fired('[playbooks.p99_spike]\nfor_s = "5s"\n', tmp_path, 20) == []


def test_a_bad_for_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "doctor.toml").write_text('[playbooks.long_prompt_share]\nfor_s = "soon"\n')
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "doctor.toml")
    assert err.value.key == "playbooks.long_prompt_share.for_s"
