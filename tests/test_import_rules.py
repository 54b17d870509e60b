"""The design's floors: an import may only point down, only tui/ imports textual, and no modules import each other.

Circles are between modules (package `__init__` files included), over every import the code holds: module level
and inside functions, and those under `if TYPE_CHECKING:` too. Those count because a type-only import is still
a dependency of one module's design on the other's (mypy reads them as one unit), and because the circles issue
#13 names (router.app <-> router.proxy, doctor.remedy.launcher <-> doctor.remedy.vllm_admin) were type-only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("trials", "tui", "doctor", "playbooks", "collectors", "router", "sim")
ALLOWED: dict[str, set[str]] = {
    "trials": {"doctor", "playbooks", "collectors", "router", "sim"},
    "tui": {"doctor", "playbooks", "collectors"},
    "doctor": {"playbooks", "collectors", "router", "sim"},
    "playbooks": {"collectors"},
    "collectors": set(),
    "router": set(),
    "sim": set(),
}


# Circles another change is removing; each entry must still be a circle (delete it when it is gone).
KNOWN_CIRCLES_BEING_REMOVED: dict[frozenset[str], str] = {
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


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph(root: Path, rooms: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of `rooms` it imports (anywhere in the file)."""
    files = {_module_name(p, root): p for room in rooms for p in sorted((root / room).rglob("*.py"))}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps |= {t for a in node.names if (t := resolve(a.name))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if (t := full if full in files else resolve(base)) is not None:
                        deps.add(t)
        deps.discard(mod)
        graph[mod] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def test_no_import_circles() -> None:
    circles = _circles(_module_graph(ROOT, ROOMS))
    new = [" <-> ".join(sorted(c)) for c in circles if c not in KNOWN_CIRCLES_BEING_REMOVED]
    assert not new, f"modules that import each other (directly or round a circle): {new}"


def test_known_circles_are_still_circles() -> None:
    circles = set(_circles(_module_graph(ROOT, ROOMS)))
    gone = [" <-> ".join(sorted(c)) for c in KNOWN_CIRCLES_BEING_REMOVED if c not in circles]
    assert not gone, f"no longer circles: delete them from KNOWN_CIRCLES_BEING_REMOVED: {gone}"


def test_circle_rule_catches_circles(tmp_path: Path) -> None:
    pkg = tmp_path / "r"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from r.b import g\n")  # function level
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from r import a\n")
    (pkg / "sub" / "__init__.py").write_text("from .c import x\n")
    (pkg / "sub" / "c.py").write_text("from r.sub import y\n")  # a module and its own package
    (pkg / "d.py").write_text("import r.a\n")  # points into a circle, is not part of one
    assert sorted(sorted(c) for c in _circles(_module_graph(tmp_path, ("r",)))) == [
        ["r.a", "r.b"], ["r.sub", "r.sub.c"]]
