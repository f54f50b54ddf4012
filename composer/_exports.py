"""Lazy re-exports: a subpackage's `__init__` names its public API without importing every
module on first touch, so each command imports only what it needs (the CLI starts fast).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Iterable[str]]
) -> tuple[list[str], Callable[[str], Any]]:
    """`__all__` and a module `__getattr__` that imports `package.<module>` on first use
    of one of its exported names; `exports` maps module names to the names they export."""
    home = {name: f"{package}.{module}" for module, names in exports.items() for name in names}

    def module_getattr(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home[name]), name)

    return sorted(home), module_getattr
