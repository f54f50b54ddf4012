"""Hints for K read from the checkpoints' config.json files.

- A DFlash draft's `dflash_config.block_size` is the block it was trained on:
  K = block_size - 1 is the starting point of the sweep.
- The target's `mtp_num_hidden_layers` (top level or under `text_config`) says whether
  MTP is available; vLLM rejects a K above the MTP layer count that is not a multiple of it.

Only the keys above are read (see composer/checkpoints.py for the full checks of `doctor`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer.stack import Stack, Variant

CONFIG_FILE = "config.json"


def read_config(directory: str | Path) -> dict[str, Any] | None:
    """A checkpoint's config.json, or None when it is missing or unreadable."""
    path = Path(directory) / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _lookup(config: Mapping[str, Any], key: str) -> Any:
    if key in config:
        return config[key]
    nested = config.get("text_config")
    return nested.get(key) if isinstance(nested, Mapping) else None


def draft_block_size(config: Mapping[str, Any]) -> int | None:
    """`dflash_config.block_size` of a draft checkpoint (top level or text_config)."""
    dflash = _lookup(config, "dflash_config")
    size = dflash.get("block_size") if isinstance(dflash, Mapping) else None
    return size if isinstance(size, int) and size > 1 else None


def mtp_layers(config: Mapping[str, Any]) -> int | None:
    """`mtp_num_hidden_layers` of a target checkpoint (None when absent)."""
    layers = _lookup(config, "mtp_num_hidden_layers")
    return layers if isinstance(layers, int) and layers >= 0 else None


def mtp_k_problem(k: int, layers: int) -> str | None:
    """Why vLLM would reject K for this MTP depth, or None when K is allowed."""
    if layers <= 0:
        return "the target has no MTP layers"
    if k > layers and k % layers != 0:
        return f"K={k} exceeds the {layers} MTP layer(s) and is not divisible by {layers}"
    return None


@dataclass(frozen=True)
class KHints:
    """What the checkpoints say about K for one variant."""

    variant: str
    suggested_k: int | None
    messages: tuple[str, ...]


def variant_hints(stack: Stack, variant: Variant, ks: Iterable[int]) -> KHints:
    """Hints for one speculative variant and the Ks about to be measured."""
    spec = variant.speculative
    if spec is None:
        return KHints(variant.name, None, ())
    ks = sorted(set(ks))
    messages: list[str] = []
    suggested: int | None = None
    if spec.draft_model:
        config = read_config(stack.draft_dir)
        block = draft_block_size(config) if config else None
        if block is None:
            messages.append(f"{variant.name}: no dflash_config.block_size in {stack.draft_dir}/{CONFIG_FILE}")
        else:
            suggested = block - 1
            messages.append(
                f"{variant.name}: the draft was trained with block_size {block}: start from K={suggested}"
            )
    if spec.method == "mtp" or spec.method.endswith("_mtp"):
        config = read_config(stack.model_dir)
        layers = mtp_layers(config) if config else None
        if layers is None:
            messages.append(f"{variant.name}: no mtp_num_hidden_layers in {stack.model_dir}/{CONFIG_FILE}")
        elif layers == 0:
            messages.append(f"{variant.name}: the target has no MTP layers: MTP is not available")
        else:
            messages += [
                f"{variant.name}: {p}: vLLM will reject it" for k in ks if (p := mtp_k_problem(k, layers))
            ]
    return KHints(variant.name, suggested, tuple(messages))
