"""Per-method speculative decoding behaviour.

A method may have a module here named after it (``mtp.py``, ...). It can define
``NEEDS_V2_MODEL_RUNNER: bool``, ``validate(config, context) -> None`` (raise ValueError
with vLLM's message) and ``draft_block_size(config, context) -> int | None``. Methods
without a module need no extra checks.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class SpecContext:
    """What method checks may look at besides the speculative config itself."""

    target_config: dict[str, Any]
    attention_backend: str
    log_warning: Any = None


def method_module(method: str) -> ModuleType | None:
    """The behaviour module for ``method``, or None when the method has none."""
    name = f"{__name__}.{method}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name == name:
            return None
        raise


def needs_v2_model_runner(method: str) -> bool:
    """True when the method runs only on the V2 model runner (needs UVA/pinned memory)."""
    module = method_module(method)
    return bool(getattr(module, "NEEDS_V2_MODEL_RUNNER", False))
