"""DFlash block drafting: a small draft model proposes a whole block in one pass.

The drafter attends non-causally inside the block, so its attention backend must support
non-causal attention; its block size is ``dflash_config.block_size`` of the draft checkpoint.
"""

from __future__ import annotations

import json
import os
from typing import Any

from vllm.v1.spec_decode import SpecContext

NEEDS_V2_MODEL_RUNNER = True
NON_CAUSAL_BACKENDS = ("FLASH_ATTN", "FLEX_ATTENTION")
DEFAULT_BLOCK_SIZE = 8


def _draft_config(model: str) -> dict[str, Any]:
    path = os.path.join(model, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def validate(config: Any, context: SpecContext) -> None:
    """A draft model is required and the drafter's backend must be non-causal capable."""
    if not config.model:
        raise ValueError("DFlash requires a draft model: set 'model' in speculative_config.")
    backend = (config.attention_backend or context.attention_backend).upper()
    if backend not in NON_CAUSAL_BACKENDS:
        raise ValueError(
            f"Attention backend {backend} does not have non-causal support, which is required for DFlash."
        )


def draft_block_size(config: Any, context: SpecContext) -> int:
    """``dflash_config.block_size`` of the draft checkpoint (8 when unreadable)."""
    section = _draft_config(config.model or "").get("dflash_config") or {}
    value = section.get("block_size")
    if isinstance(value, int) and value > 0:
        return value
    if context.log_warning is not None:
        context.log_warning(f"No dflash_config.block_size in {config.model}; assuming {DEFAULT_BLOCK_SIZE}.")
    return DEFAULT_BLOCK_SIZE
