"""The package's shape: one subpackage per part of the architecture, each with its contract,
and imports that only point the allowed way (no layer reaches back up)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "composer"
SUBPACKAGES = (
    "stack",
    "render",
    "engine",
    "probes",
    "capacity",
    "swap",
    "doctor",
    "overlay",
    "bench",
    "kube",
    "gateway",
)
# What each part may import from the rest of the package (besides errors, labels, signals, _exports).
ALLOWED = {
    "stack": {"gateway"},  # the gateway's own bounds of its settings (composer.gateway.config)
    "render": {"stack"},
    "probes": set(),
    "capacity": {"stack", "probes"},
    "engine": {"stack", "render", "gateway"},
    "overlay": set(),
    "doctor": {"stack", "render", "probes", "overlay", "engine", "capacity"},
    "swap": {"stack", "render", "engine", "probes", "capacity", "doctor", "gateway"},
    "bench": {"stack", "render", "engine", "probes", "swap"},
    "kube": {"stack", "render", "engine", "gateway", "swap"},
    "gateway": set(),
}
SHARED = {"errors", "labels", "signals", "_exports", "__init__", "__version__"}


def _imports(path: Path) -> set[str]:
    """Top-level parts of `composer.X...` that a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("composer"):
            parts = node.module.split(".")
            if len(parts) > 1:
                found.add(parts[1])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "composer" and len(parts) > 1:
                    found.add(parts[1])
    return found


def test_no_module_families_by_name_prefix_at_the_top() -> None:
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert top == ["__init__", "__main__", "_exports", "errors", "labels", "signals"], top


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_each_subpackage_states_its_contract_and_exports_resolve(name: str) -> None:
    module = importlib.import_module(f"composer.{name}")
    doc = module.__doc__ or ""
    assert "Owns:" in doc and "May import:" in doc and "Public:" in doc, f"composer.{name} has no contract"
    assert module.__all__, f"composer.{name} names no public API"
    for public in module.__all__:
        assert getattr(module, public) is not None
        assert f"`{public}`" in doc, f"composer.{name}'s contract does not name {public}"


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_imports_follow_the_data_flow(name: str) -> None:
    for path in (PACKAGE / name).rglob("*.py"):
        used = _imports(path) - SHARED - {name}
        extra = used - ALLOWED[name]
        assert not extra, f"{path.relative_to(REPO)} imports {sorted(extra)}, outside its contract"


def test_domain_code_never_imports_click() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in PACKAGE.rglob("*.py")
        if "cli" not in p.relative_to(PACKAGE).parts
        and "click" in {n.split(".")[0] for n in _module_names(p)}
    ]
    assert offenders == []


def test_the_command_line_is_a_package_that_only_the_entry_points_import() -> None:
    """composer/cli/ states its contract; no other part of the package imports it."""
    import composer.cli

    doc = composer.cli.__doc__ or ""
    assert "Owns:" in doc and "May import:" in doc and "Public:" in doc
    for public in composer.cli.__all__:
        assert f"`{public}`" in doc
    importers = [
        str(p.relative_to(REPO))
        for p in PACKAGE.rglob("*.py")
        if "cli" not in p.relative_to(PACKAGE).parts and p.name != "__main__.py" and "cli" in _imports(p)
    ]
    assert importers == []


def test_cli_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (PACKAGE / "cli").glob("*.py")}
    assert max(sizes.values()) <= 300, sizes


def _module_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# What each of the gateway's floors may import from the rest of the gateway.
GATEWAY_FLOORS = {
    "public": {"config", "wire", "routing", "status"},
    "routing": {"config", "wire", "status"},
    "control": {"config", "wire", "public", "routing", "status"},
    "status": {"config", "wire", "control", "public", "routing"},
    "host": {"config", "wire"},
}


def _gateway_parts(path: Path) -> set[str]:
    """The gateway's parts (`public`, `config`, ...) that a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("composer.gateway."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.ImportFrom) and node.module == "composer.gateway":
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("floor", sorted(GATEWAY_FLOORS))
def test_the_gateway_floors_import_only_what_their_contracts_name(floor: str) -> None:
    module = importlib.import_module(f"composer.gateway.{floor}")
    assert "Owns:" in (module.__doc__ or "") and "May import:" in (module.__doc__ or "")
    for path in (PACKAGE / "gateway" / floor).rglob("*.py"):
        extra = _gateway_parts(path) - GATEWAY_FLOORS[floor] - {floor}
        assert not extra, f"{path.relative_to(REPO)} imports {sorted(extra)}, outside its floor's contract"


def test_the_gateway_server_never_imports_the_host_client() -> None:
    server = [p for p in (PACKAGE / "gateway").rglob("*.py") if "host" not in p.relative_to(PACKAGE).parts]
    assert len(server) > 30
    for path in server:
        if path.name != "__init__.py" or path.parent.name != "gateway":  # the package re-exports it
            assert "host" not in _gateway_parts(path), f"{path.relative_to(REPO)} imports the host client"
