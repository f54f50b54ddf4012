"""No import cycle at run time inside `composer/`: the graph of the imports a module can run
(at its top or inside a function; those under `if TYPE_CHECKING:` never run) is acyclic."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "composer"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _run_time(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import a module can run: at its top or in a function, not for type checkers."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found += _run_time(node.orelse)
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                found += _run_time([child])
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each `composer` module -> the `composer` modules its run-time imports load."""
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _run_time(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            graph[name] |= {t for t in targets if t in paths and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_imports_of_every_form() -> None:
    graph = import_graph()
    assert "composer.errors" in graph["composer.gateway.host.client"]  # from composer.errors import ...
    assert "composer.gateway.config" in graph["composer.gateway.ctl"]  # from .config import ...
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_at_run_time() -> None:
    assert cycles(import_graph()) == []
