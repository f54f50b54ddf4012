"""No module of the swap or kube packages imports one that imports it back, directly or
through others, not even inside a function or under TYPE_CHECKING; kube imports no private
name of another module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("composer/swap", "composer/kube")


def _imports(path: Path, package: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == package:  # `from composer.swap import snapshot`
                found |= {f"{package}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    modules = {
        f"{p.replace('/', '.')}.{f.stem}": (f, p.replace("/", "."))
        for p in PACKAGES
        for f in sorted((REPO / p).glob("*.py"))
        if f.stem != "__init__"
    }
    return {name: _imports(f, package) & set(modules) for name, (f, package) in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name) :]
        if name in done:
            return None
        for dep in sorted(graph[name]):
            if found := visit(dep, [*path, name]):
                return found
        done.add(name)
        return None

    return next((c for name in sorted(graph) if (c := visit(name, []))), None)


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("path", sorted((REPO / "composer" / "kube").glob("*.py")), ids=lambda p: p.name)
def test_kube_imports_no_private_name(path: Path) -> None:
    private = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and alias.name != "__future__"
    ]
    assert private == []
