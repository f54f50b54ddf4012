"""The formulas (pure): one function for each capacity figure, bytes in, bytes out.

Per GPU a variant holds its weights, its KV cache and its activations; each variant
asleep beside it still holds a residue; the host holds every sleeper's weights. vLLM
sizes the KV cache as `--kv-cache-memory-bytes` when set, else as what
`--gpu-memory-utilization` of the GPU leaves after the weights and the activation peak.
None stands for unknown and spreads: a sum with an unknown part is unknown.
"""

from __future__ import annotations

GIB = 1 << 30
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
"""vLLM's default `--gpu-memory-utilization` (0.33.0 parser)."""
ACTIVATIONS_PER_GPU = 1_696_512_327
"""1.58 GiB per GPU of non-KV runtime memory (activation peak, CUDA graphs): an estimate."""


def weights_per_gpu(
    target_bytes: int | None,
    tensor_parallel: int,
    draft_bytes: int | None = None,
    draft_tensor_parallel: int | None = None,
    configured: int | None = None,
) -> int | None:
    """The target's share under TP plus the drafter's under its own TP; `configured`
    (the variant's `weights_bytes`) wins. `draft_tensor_parallel` None: no drafter."""
    if configured is not None:
        return configured
    if target_bytes is None:
        return None
    share = target_bytes // tensor_parallel
    if draft_tensor_parallel is None:
        return share
    return None if draft_bytes is None else share + draft_bytes // draft_tensor_parallel


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
    """What one GPU must hold for a variant to run: weights + KV cache + activations.

    Also the release budget: the bytes that must be free on each GPU before it starts."""
    if weights is None or kv_cache is None:
        return None
    return weights + kv_cache + activations


def known_need(weights: int | None, kv_cache: int | None, activations: int) -> int:
    """A lower bound of `gpu_need` while a part is unknown (unknown parts count 0)."""
    return (weights or 0) + (kv_cache or 0) + activations


def sleep_residue(residue: int, sleepers: int) -> int:
    """GPU bytes held per GPU by `sleepers` variants asleep (CUDA context, graph pools,
    NCCL buffers stay while the weights and the KV cache are gone).

    `residue` is `stack.sleep_residue` (default 1.3 GiB, from reports of 1.2-1.4 GiB per GPU
    for vLLM asleep). Its floor, measured on an NVIDIA H200 (torch 2.11.0+cu130, driver
    580.159.04, `benchmarks/cuda_residue_probe.py`, `benchmarks/results/cuda_residue_h200.json`)
    as the device memory a process holds after every tensor is freed: CUDA context 621 MiB,
    + cuBLAS 717 MiB, + eight kept CUDA graphs of a small MLP 847 MiB, + a one-rank NCCL
    group 1335 MiB (1.30 GiB). Larger graph sets and TP>1 NCCL buffers hold more.
    """
    return residue * sleepers


def host_ram_of_sleeper(weights: int | None, tensor_parallel: int, level: int) -> int | None:
    """Host RAM one sleeping variant holds: at level 1 every rank copies its GPU's weights
    to the host (weights per GPU x TP); level 2 drops them (0)."""
    if level == 2:
        return 0
    return None if weights is None else weights * tensor_parallel


def host_ram_for_sleepers(held: list[int | None]) -> int | None:
    """The sleepers' host RAM together; None when one of them is unknown."""
    if any(h is None for h in held):
        return None
    return sum(h or 0 for h in held)


def tokens_of(size: int, kv_bytes_per_token: int | None) -> int | None:
    """How many tokens of KV cache `size` bytes per GPU would hold (None: unknown)."""
    return size // kv_bytes_per_token if kv_bytes_per_token else None


def gib(size: int | None) -> str:
    """Bytes as GiB with one decimal (`1.3 GiB`), `?` when unknown."""
    return "?" if size is None else f"{size / GIB:.1f} GiB"
