"""What the formulas read from the machine: checkpoint sizes, the KV bytes per token, GPU
and host memory. Read-only; an unreadable fact is None (with the reason), never a guess.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from composer.errors import ComposerError, GpuProbeError

if TYPE_CHECKING:
    from composer.probes.gpu import GpuProbe
    from composer.stack.model import Stack


def checkpoint_bytes(directory: str) -> tuple[int | None, str]:
    """A checkpoint's weight bytes from its safetensors headers, or None and the reason."""
    from composer.probes.checkpoints import weights_bytes

    try:
        total = weights_bytes(directory)
    except (ComposerError, OSError, ValueError) as err:  # unreadable: unknown, said so
        return None, str(err)
    return (total, "") if total is not None else (None, f"no safetensors in {directory}")


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
