"""The wheel's declared runtime dependencies are exactly what the host-side code imports.

A plain `pip install vllm-variant-composer` (no extras) must run every command: each
third-party module imported by `composer` outside the gateway's server modules (they run
in the gateway's own image) is a runtime dependency. An import guarded by
`except ImportError` is optional and belongs to an extra instead.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib

from tests.conftest import REPO

PACKAGE = REPO / "composer"
# The gateway's server modules (in composer/gateway/): they run in the gateway image, never on the host.
GATEWAY_SERVER = {
    "__main__.py",
    "control/app.py",
    "ctl.py",
    "public/answers.py",
    "public/continuation.py",
    "public/http10.py",
    "public/keepalive.py",
    "public/limits.py",
    "public/pool.py",
    "public/proxy.py",
    "public/screen.py",
    "routing/gate.py",
    "routing/liveness.py",
    "routing/upstream.py",
    "runtime.py",
    "server.py",
    "status/metrics.py",
    "status/throughput.py",
    "status/view.py",
}
# Import names that differ from their distribution's name.
DISTRIBUTION = {
    "yaml": "pyyaml",
    "dotenv": "python-dotenv",
    "pynvml": "nvidia-ml-py",
    "prometheus_client": "prometheus-client",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalise(re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0])


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """True when an import sits in a `try` whose handlers catch ImportError."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Try) and child in parent.body:
            for handler in parent.handlers:
                names = ast.dump(handler.type) if handler.type else ""
                if "ImportError" in names or "ModuleNotFoundError" in names:
                    return True
        child, parent = parent, parents.get(parent)
    return False


@functools.cache  # the sources do not change during a run: one scan for this module's tests
def host_imports() -> tuple[frozenset[str], frozenset[str]]:
    """(required, optional) distributions that the host-side modules import."""
    required: set[str] = set()
    optional: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).as_posix().removeprefix("gateway/") in GATEWAY_SERVER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top == "composer":
                    continue
                name = _normalise(DISTRIBUTION.get(top, top))
                (optional if _guarded(node, parents) else required).add(name)
    return frozenset(required), frozenset(optional - required)


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_every_host_import_is_a_runtime_dependency_and_every_dependency_is_used() -> None:
    required, _ = host_imports()
    declared = {_requirement_name(r) for r in _project()["dependencies"]}
    assert required - declared == set(), "imported on the host but not a runtime dependency"
    assert declared - required == set(), "declared as a runtime dependency but imported nowhere"


def test_optional_imports_belong_to_an_extra() -> None:
    _, optional = host_imports()
    extras = {_requirement_name(r) for reqs in _project()["optional-dependencies"].values() for r in reqs}
    assert optional, "the scan finds the guarded imports (pynvml, matplotlib)"
    assert optional - extras == set(), "an optional import that no extra installs"


def test_the_gateway_server_packages_stay_an_extra() -> None:
    declared = {_requirement_name(r) for r in _project()["dependencies"]}
    gateway = {_requirement_name(r) for r in _project()["optional-dependencies"]["gateway"]}
    assert {"starlette", "uvicorn", "aiohttp"} <= gateway
    assert not {"starlette", "uvicorn", "aiohttp"} & declared


def test_the_scan_sees_the_host_imports() -> None:
    # the prometheus_client import that a plain install once lacked (standby's wake check)
    required, _ = host_imports()
    assert "prometheus-client" in required and "httpx" in required
