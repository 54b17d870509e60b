"""`doctor playbooks`: the library as text and JSON, and the runbooks document (committed, anchors resolve)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from doctor.playbooks_cli import FIRES_WHEN, fires_when, main, remedy_kinds, render_markdown
from doctor.rules import load_playbooks
from playbooks.model import ACTION_KINDS
from playbooks.registry import PLAYBOOK_MODULES

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "runbooks.md"
REGENERATE = ".venv/bin/python -m doctor.playbooks_cli --format markdown --out docs/runbooks.md"


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_committed_runbooks_are_the_generated_document() -> None:
    playbooks, missing = load_playbooks()
    assert RUNBOOKS.read_text() == render_markdown(playbooks, missing), \
        f"docs/runbooks.md is stale: regenerate it with `{REGENERATE}` and commit it"


def test_every_finding_runbook_anchor_resolves_to_a_heading() -> None:
    text = RUNBOOKS.read_text()
    playbooks, _ = load_playbooks()
    for pb in playbooks.values():
        path, _, fragment = pb.runbook_anchor().partition("#")
        assert path == "docs/runbooks.md"
        found = re.search(rf'<a id="{re.escape(fragment)}"></a>\n\n## {pb.id}: ', text)
        assert found, f"{pb.runbook_anchor()} has no heading in docs/runbooks.md"


def test_every_registered_playbook_has_a_section() -> None:
    _, missing = load_playbooks()
    assert not missing, f"registered playbooks without a module: {missing}"
    headings = re.findall(r"^## (\w+): ", RUNBOOKS.read_text(), re.M)
    assert headings == list(PLAYBOOK_MODULES)


def test_sections_carry_fires_when_severity_runbook_and_action_kinds() -> None:
    text = RUNBOOKS.read_text()
    section = text.split('<a id="kv-pressure"></a>')[1].split("<a id=")[0]
    assert "**Fires when** KV-cache usage (`kv_cache_usage`, never framebuffer use) above 0.75" in section
    assert ", for 5m." in section and "**Severity** warning." in section
    assert "**What it means.**" in section and "**Confirm by hand.**" in section and "**Remedies.**" in section
    assert f"1. `relaunch`: {ACTION_KINDS['relaunch']}" in section
    assert f"2. `set_max_in_flight`: {ACTION_KINDS['set_max_in_flight']}" in section


def test_fires_when_templates_match_every_playbooks_parameters() -> None:
    playbooks, _ = load_playbooks()
    assert set(FIRES_WHEN) == set(PLAYBOOK_MODULES)
    for pb in playbooks.values():
        text = fires_when(pb)
        assert not text.startswith("thresholds "), f"{pb.id}: FIRES_WHEN names a parameter not in its defaults"
        assert "%(" not in text


def test_remedy_kinds_are_known_and_present() -> None:
    playbooks, _ = load_playbooks()
    for pb in playbooks.values():
        kinds = remedy_kinds(pb)
        assert kinds, f"{pb.id}: no Action kinds found in its remedies"
        assert set(kinds) <= set(ACTION_KINDS)
    assert remedy_kinds(playbooks["engine_down"])[0] == "relaunch"
    assert "set_max_in_flight" in remedy_kinds(playbooks["batch_underutilized"])  # via a helper in another module


def test_text_lists_id_severity_signals_thresholds_and_for() -> None:
    code, out, _ = _run()
    assert code == 0
    assert "kv_pressure  [warning]  KV-cache pressure" in out
    block = out.split("kv_pressure  [warning]")[1].split("\n")[1:4]
    assert block[0].strip().startswith("signals: kv_cache_usage")
    assert "kv_usage_ratio=0.75" in block[1] and block[2].strip() == "for: 5m"
    assert all(f"{pid}  [" in out for pid in PLAYBOOK_MODULES)


def test_json_describes_every_playbook() -> None:
    code, out, _ = _run("--format", "json")
    assert code == 0
    doc = json.loads(out)
    playbooks, _ = load_playbooks()
    assert [p["id"] for p in doc["playbooks"]] == list(PLAYBOOK_MODULES)
    for entry in doc["playbooks"]:
        pb = playbooks[entry["id"]]
        assert entry["thresholds"] == {k: float(v) for k, v in pb.defaults.items()}
        assert entry["for_s"] == pb.for_s and entry["severity"] == pb.severity
        assert entry["runbook_anchor"] == pb.runbook_anchor()
    assert doc["action_kinds"] == ACTION_KINDS and doc["missing"] == []


def test_markdown_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "runbooks.md"
    code, out, err = _run("--format", "markdown", "--out", str(target))
    assert code == 0 and out == "" and "wrote" in err
    assert target.read_text() == RUNBOOKS.read_text()


@pytest.mark.parametrize("argv", [["--format", "yaml"], ["--bogus"]])
def test_bad_options_exit_3(argv: list[str]) -> None:
    code, out, err = _run(*argv)
    assert code == 3 and out == "" and err.startswith("doctor playbooks: ") and "Traceback" not in err


def test_unwritable_out_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = _run("--format", "markdown", "--out", str(tmp_path / "no" / "runbooks.md"))
    assert code == 3 and "cannot write" in err
