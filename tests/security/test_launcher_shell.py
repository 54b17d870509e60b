"""No shell string is built from outside input: an engine's name, URL and arguments reach the launcher's shell
line quoted, so `sh` (really run here) passes them on as literal arguments and runs nothing of theirs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from doctor.config import ConfigError, load_config
from doctor.remedy.launcher import LocalLauncher
from doctor.remedy.model import EngineTarget

pytestmark = pytest.mark.timeout(60)

HOSTILE = ["$(touch {tmp}/pwned-subst)", "`touch {tmp}/pwned-backtick`", "x; touch {tmp}/pwned-semicolon",
           "a\ntouch {tmp}/pwned-newline", "' ; touch {tmp}/pwned-quote ; '", "&& rm -rf {tmp}/canary"]


def _argv(launcher: LocalLauncher, target: EngineTarget, args: dict[str, object]) -> list[str]:
    """The arguments the launched command received (its template writes them NUL-separated to `argv`)."""
    rec = launcher.start(target, port=18000, gpus=[], args=args)
    deadline = time.monotonic() + 30
    while launcher.procs.exit_code(rec) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert launcher.procs.exit_code(rec) == 0, launcher.procs.log_tail(rec)
    out = launcher.procs.dir.parent / "argv"
    return out.read_bytes().decode().split("\0")[:-1]


TEMPLATE = "printf '%s\\000' {name} {url} > {state_dir}/argv"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_names_urls_and_arguments_reach_the_command_as_literal_strings(tmp_path: Path, hostile: str) -> None:
    (tmp_path / "canary").mkdir()
    word = hostile.format(tmp=tmp_path)
    launcher = LocalLauncher(tmp_path / "state")
    target = EngineTarget(name=word, role="hot", url=f"http://127.0.0.1:8000/{word}", launcher=TEMPLATE, args={})
    flag = word.replace("\n", " ")
    argv = _argv(launcher, target, {"served_model_name": word, flag: 1})
    assert argv[0] == word and argv[1].startswith("http://127.0.0.1:18000/"), argv  # each one argument, whole
    assert argv[2:] == ["--served-model-name", word, "--" + flag.replace("_", "-"), "1"], argv
    assert not list(tmp_path.glob("pwned*")) and (tmp_path / "canary").is_dir()
    assert [p.parent for p in launcher.procs.dir.rglob("*")] == [launcher.procs.dir] * len(
        list(launcher.procs.dir.iterdir())), "an engine's files stay in its directory whatever its name"


def test_a_hostile_engine_name_in_the_config_is_quoted_in_its_launch_command(tmp_path: Path) -> None:
    word = f"$(touch {tmp_path}/pwned)"
    (tmp_path / "doctor.toml").write_text(
        f'[[engines]]\nname = "{word}"\nrole = "hot"\nurl = "http://127.0.0.1:8000"\n'
        f"launcher = '''{TEMPLATE}'''\n")
    try:
        config = load_config(tmp_path / "doctor.toml")
    except ConfigError as exc:  # refusing such a name is as good: nothing runs
        assert "name" in str(exc)
        return
    [engine] = config.engines
    assert engine.launch_command(tmp_path / "state").startswith(f"printf '%s\\000' '{word}' ")
    launcher = LocalLauncher(tmp_path / "state")
    target = EngineTarget(name=engine.name, role="hot", url=engine.url, launcher=engine.launcher)
    assert _argv(launcher, target, {})[0] == word
    assert not (tmp_path / "pwned").exists()


def test_the_launcher_is_the_only_place_a_shell_runs() -> None:
    """shell=True, os.system, os.popen and create_subprocess_shell: only popen_spawn, whose line is quoted above."""
    import ast

    root = Path(__file__).resolve().parents[2]
    found = []
    for room in ("doctor", "collectors", "playbooks", "tui", "router"):
        for path in sorted((root / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not isinstance(node, ast.Call):
                    continue
                name = ast.unparse(node.func)
                shell = any(k.arg == "shell" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                            for k in node.keywords)
                if shell or name in ("os.system", "os.popen") or name.endswith("create_subprocess_shell"):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    assert len(found) == 1 and found[0].startswith("doctor/remedy/engine_procs.py:"), found
