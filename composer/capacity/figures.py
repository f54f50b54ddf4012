"""The formulas (pure): one function for each capacity figure, bytes in, bytes out.

Per GPU a variant holds its weights, KV cache and activations; each variant asleep beside
it still holds a residue; the host holds every sleeper's weights. None stands for unknown
and spreads: a sum with an unknown part is unknown.
"""

from __future__ import annotations

GIB = 1 << 30
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
"""vLLM's default `--gpu-memory-utilization` (0.33.0 parser)."""
ACTIVATIONS_PER_GPU = 1_696_512_327
"""1.58 GiB per GPU of non-KV runtime memory (activation peak, CUDA graphs): an estimate."""


def weights_per_gpu(checkpoint_bytes: int | None, tensor_parallel: int) -> int | None:
    """A checkpoint's share per GPU under its tensor parallelism (None: unknown)."""
    return None if checkpoint_bytes is None else checkpoint_bytes // tensor_parallel


def kv_cache_per_gpu(
    configured: int | None,
    gpu_total: int | None,
    utilization: float,
    weights: int | None,
    activations: int,
) -> int | None:
    """`configured` (kv_cache_memory) when set, else `gpu_total x utilization - weights -
    activations` (at least 0), as vLLM sizes it; None when that cannot be computed."""
    if configured is not None:
        return configured
    if gpu_total is None or weights is None:
        return None
    return max(int(gpu_total * utilization) - weights - activations, 0)


def gpu_need(weights: int | None, kv_cache: int | None, activations: int) -> int | None:
    """What one GPU must hold for a variant to run, and so must be free before it starts
    (the release budget): weights + KV cache + activations."""
    if weights is None or kv_cache is None:
        return None
    return weights + kv_cache + activations


def host_ram_of_sleeper(weights: int | None, tensor_parallel: int, level: int) -> int | None:
    """Host RAM one sleeping variant holds: at level 1 every rank copies its GPU's weights
    to the host (weights per GPU x TP); level 2 drops them (0)."""
    if level == 2:
        return 0
    return None if weights is None else weights * tensor_parallel


def host_ram_for_sleepers(held: list[int | None]) -> int | None:
    """The sleepers' host RAM together; None when one of them is unknown."""
    return None if None in held else sum(h for h in held if h is not None)


def gib(size: int | None) -> str:
    """Bytes as GiB with one decimal (`1.3 GiB`), `?` when unknown."""
    return "?" if size is None else f"{size / GIB:.1f} GiB"
