"""Read the target checkpoint's ``config.json`` (optional: defaults when absent)."""

from __future__ import annotations

import json
import os
from typing import Any

DEFAULT_ARCHITECTURE = "Qwen3_5ForConditionalGeneration"
DEFAULT_MAX_POSITION = 262144


def read_config(model: str) -> dict[str, Any]:
    """``MODEL/config.json`` as a dict, or ``{}`` when the directory or file is absent."""
    try:
        with open(os.path.join(model, "config.json"), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def architecture(config: dict[str, Any]) -> str:
    """First entry of ``architectures``."""
    archs = config.get("architectures") or [DEFAULT_ARCHITECTURE]
    return str(archs[0])


def max_position_embeddings(config: dict[str, Any]) -> int | None:
    """Derived max model length, from ``text_config`` or the top level."""
    for section in (config.get("text_config") or {}, config):
        value = section.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return None
