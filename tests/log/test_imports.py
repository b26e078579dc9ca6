"""The modules of ``tierlog.log`` import each other without cycles.

A cycle (even one hidden behind ``TYPE_CHECKING``) makes the import order matter and ties a base
module to what builds on it; this walks every ``import`` statement of the package's sources, so a
new cycle fails here rather than in a confusing ``ImportError`` later.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tierlog.log

_PACKAGE = "tierlog.log"


def _imports(path: Path) -> set[str]:
    """The ``tierlog.log`` modules a source file imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == _PACKAGE:
                found.update(f"{_PACKAGE}.{alias.name}" for alias in node.names)
            elif node.module.startswith(_PACKAGE + "."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(_PACKAGE + "."))
    return found


def _graph() -> dict[str, set[str]]:
    root = Path(tierlog.log.__file__).parent
    modules = {f"{_PACKAGE}.{p.stem}": p for p in root.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(path) & modules.keys() for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as the modules on it), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found is not None:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle_in_tierlog_log() -> None:
    graph = _graph()
    assert "tierlog.log.offset_index" in graph["tierlog.log.indexer"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_index_does_not_import_its_subclasses() -> None:
    graph = _graph()
    assert not graph["tierlog.log.index"] & {"tierlog.log.offset_index", "tierlog.log.time_index"}
