"""The design's floors: an import may only point down, and only tui/ imports textual."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("tui", "doctor", "playbooks", "collectors", "router", "sim")
ALLOWED: dict[str, set[str]] = {
    "tui": {"doctor", "playbooks", "collectors"},
    "doctor": {"playbooks", "collectors", "router", "sim"},
    "playbooks": {"collectors"},
    "collectors": set(),
    "router": set(),
    "sim": set(),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def _room_files() -> list[tuple[str, Path]]:
    return [(room, p) for room in ROOMS for p in sorted((ROOT / room).rglob("*.py"))]


@pytest.mark.parametrize(("room", "path"), _room_files(), ids=lambda v: str(v))
def test_imports_point_down(room: str, path: Path) -> None:
    for line, top in _imports(path):
        if top in ROOMS and top != room:
            assert top in ALLOWED[room], f"{path.relative_to(ROOT)}:{line} imports {top} ({room} may not)"
        if top == "textual":
            assert room == "tui", f"{path.relative_to(ROOT)}:{line} imports textual outside tui/"
        assert top != "vllm", f"{path.relative_to(ROOT)}:{line} imports vllm; the core talks HTTP only"


def test_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("from doctor.cli import main\nimport textual\n")
    assert [top for _, top in _imports(bad)] == ["doctor", "textual"]
