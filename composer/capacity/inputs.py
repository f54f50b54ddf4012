"""What the formulas read: checkpoint sizes, the KV bytes per token, GPU and host memory.

Never changes anything. Unreadable facts are None with the reason, never a guess.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer.capacity import figures
from composer.errors import ComposerError, GpuProbeError

if TYPE_CHECKING:
    from composer.probes.gpu import GpuProbe
    from composer.stack.model import Stack, Variant


@dataclass(frozen=True)
class Weights:
    """A variant's weights per GPU, part by part (target, then drafter) as read."""

    parts: tuple[tuple[str, int | None], ...]
    unknown: tuple[str, ...] = ()
    configured: int | None = None  # the variant's weights_bytes: wins over the parts

    @property
    def per_gpu(self) -> int | None:
        """The weights per GPU (None while a part is unknown and none is configured)."""
        if self.configured is not None:
            return self.configured
        return None if self.unknown else sum(b or 0 for _, b in self.parts)

    @property
    def known(self) -> int:
        """The known parts: a lower bound while something is unknown."""
        return self.per_gpu if self.per_gpu is not None else sum(b or 0 for _, b in self.parts)


def draft_tensor_parallel_size(stack: Stack, variant: Variant) -> int:
    """`draft_tensor_parallel_size` from the speculative extra, else the stack's TP."""
    extra = dict(variant.speculative.extra) if variant.speculative else {}
    value = extra.get("draft_tensor_parallel_size")
    valid = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if valid else stack.tensor_parallel_size  # type: ignore[return-value]


def checkpoint_bytes(directory: str) -> tuple[int | None, str]:
    """A checkpoint's weight bytes from its safetensors headers, or None and the reason."""
    from composer.probes.checkpoints import weights_bytes

    try:
        total = weights_bytes(directory)
    except (ComposerError, OSError, ValueError) as err:  # unreadable: unknown, said so
        return None, str(err)
    return (total, "") if total is not None else (None, f"no safetensors in {directory}")


def variant_weights(stack: Stack, variant: Variant) -> Weights:
    """Per-GPU weight shares (target under TP, drafter under its TP) and what is unknown."""
    tp = stack.tensor_parallel_size
    target, why = checkpoint_bytes(stack.model_dir)
    share = figures.weights_per_gpu(target, tp)
    parts: list[tuple[str, int | None]] = [("weights", share)]
    unknown = [] if share is not None else [f"target weights unknown ({why})"]
    spec = variant.speculative
    if spec is not None and spec.draft_model:
        draft_tp = draft_tensor_parallel_size(stack, variant)
        draft, why = checkpoint_bytes(stack.draft_dir)
        draft_share = figures.weights_per_gpu(draft, draft_tp)
        parts.append((f"draft weights (TP {draft_tp})", draft_share))
        if draft_share is None:
            unknown.append(f"draft weights unknown ({why})")
    return Weights(tuple(parts), tuple(unknown), variant.weights_bytes)


def memory_utilization(variant: Variant) -> float:
    """The variant's `--gpu-memory-utilization` from its extra args, else vLLM's default."""
    args = list(variant.extra_args)
    for i, arg in enumerate(args):
        if arg.startswith("--gpu-memory-utilization"):
            value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "")
            try:
                return float(value)
            except ValueError:
                break
    return figures.DEFAULT_GPU_MEMORY_UTILIZATION


def host_memory() -> int | None:
    """The host's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_memory(stack: Stack, probe: GpuProbe | None = None) -> tuple[int | None, str]:
    """Memory of the stack's smallest GPU and where it came from: the GPU probe when it sees
    the stack's GPUs, else `stack.gpu_memory_bytes` (None: unknown)."""
    from composer.probes.gpu import detect_probe, select_gpus

    if stack.gpus is not None:
        probe = probe if probe is not None else detect_probe()
        if probe.available:
            try:
                gpus = select_gpus(probe.gpus(), stack.gpus)
            except GpuProbeError:
                gpus = []
            if gpus:
                return min(g.total_bytes for g in gpus), f"probed by {probe.name}"
    if stack.gpu_memory_bytes is not None:
        return stack.gpu_memory_bytes, "stack.gpu_memory_bytes"
    return None, ""


def kv_bytes_per_token(stack: Stack) -> int | None:
    """KV cache bytes per token per GPU, from the checkpoint's config.json (None: unknown)."""
    from composer.probes.checkpoints import kv_bytes_per_token as model_bytes
    from composer.probes.checkpoints import read_config

    try:
        total = model_bytes(read_config(stack.model_dir))
    except ComposerError:
        return None
    return total // stack.tensor_parallel_size if total else None
