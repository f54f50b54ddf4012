"""Hints for K from the checkpoints' config.json: a DFlash draft's `block_size` suggests
K = block_size - 1 and a larger K is skipped (`up` refuses it); the target's MTP layer count
says whether MTP is available, and vLLM rejects a K above it that is not a multiple of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from composer.errors import CheckpointError
from composer.probes.checkpoints import dflash_block_size, mtp_layers, read_config
from composer.stack.model import Stack, Variant
from composer.stack.values import MTP_METHODS, V2_RUNNER_METHODS


@dataclass(frozen=True)
class KHints:
    """What the checkpoints say about K for one variant."""

    suggested_k: int | None
    messages: tuple[str, ...]
    rejected: tuple[tuple[int, str], ...] = ()


def variant_hints(stack: Stack, variant: Variant, ks: Iterable[int]) -> KHints:
    """Hints for one speculative variant and the Ks about to be measured."""
    spec = variant.speculative
    if spec is None:
        return KHints(None, ())
    name = variant.name
    messages: list[str] = []
    rejected: list[tuple[int, str]] = []
    suggested: int | None = None
    if spec.draft_model:
        try:
            block = dflash_block_size(read_config(stack.draft_dir))
        except CheckpointError as err:
            block = None
            messages.append(f"{name}: cannot read the draft's config: {err}")
        if block is not None and block > 1:
            suggested = block - 1
            messages.append(f"{name}: the draft was trained with block_size {block}: start at K={suggested}")
            if spec.method in V2_RUNNER_METHODS:  # the same rule as doctor's draft-k check
                for k in sorted(k for k in set(ks) if k > block - 1):
                    problem = f"K={k} exceeds the draft's trained block (block_size {block})"
                    messages.append(f"{name}: {problem}: up refuses it")
                    rejected.append((k, problem))
    if spec.method in MTP_METHODS:
        try:
            layers = mtp_layers(read_config(stack.model_dir))
        except CheckpointError as err:
            messages.append(f"{name}: cannot read the target's config: {err}")
        else:
            if layers == 0:
                messages.append(f"{name}: the target has no mtp_num_hidden_layers: MTP is not available")
            else:
                for k in sorted(k for k in set(ks) if k > layers and k % layers != 0):
                    problem = f"K={k} exceeds the {layers} MTP layer(s) and is not divisible by {layers}"
                    messages.append(f"{name}: {problem}: vLLM will reject it")
                    rejected.append((k, problem))
    return KHints(suggested, tuple(messages), tuple(rejected))
