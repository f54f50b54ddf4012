"""KV cache budget: how many tokens fit, and vLLM's errors when they don't."""

from __future__ import annotations

from dataclasses import dataclass

from vllm.sim.sizes import gib

NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine."
)


@dataclass(frozen=True)
class KvBudget:
    """Bytes available for the KV cache on each GPU and the resulting capacity."""

    available_bytes: int
    bytes_per_token: int

    @property
    def tokens(self) -> int:
        return max(0, self.available_bytes // self.bytes_per_token)

    def concurrency(self, max_model_len: int) -> float:
        return self.tokens / max_model_len


def available_bytes(
    kv_cache_memory_bytes: int | None,
    gpu_memory_bytes: int,
    gpu_memory_utilization: float,
    weights_bytes: int,
    activation_bytes: int,
) -> int:
    """Explicit ``--kv-cache-memory-bytes`` wins; else the utilisation share minus the rest."""
    if kv_cache_memory_bytes is not None:
        return kv_cache_memory_bytes
    budget = gpu_memory_bytes * gpu_memory_utilization
    return int(budget - weights_bytes - activation_bytes)


def check_fits(budget: KvBudget, max_model_len: int) -> None:
    """Raise vLLM's ValueError when one max-length request does not fit."""
    if budget.available_bytes <= 0:
        raise ValueError(NO_MEMORY)
    needed = max_model_len * budget.bytes_per_token
    if needed > budget.available_bytes:
        raise ValueError(
            f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({gib(needed):.2f} GiB KV cache is needed, which is larger than the available "
            f"KV cache memory ({gib(budget.available_bytes):.2f} GiB). Based on the available "
            f"memory, the estimated maximum model length is {budget.tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine."
        )
