"""Known vLLM log signatures, each with what it means and how to fix it."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    """A log pattern and its explanation."""

    name: str
    pattern: str
    explanation: str
    fix: str

    def matches(self, log: str) -> bool:
        return re.search(self.pattern, log) is not None


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "uva-wsl2",
        r"UVA is not available",
        "On WSL2 vLLM disables pinned memory, and the V2 model runner (used by DFlash) needs it (UVA).",
        "set VLLM_WSL2_ENABLE_PIN_MEMORY=1 in the variant's env",
    ),
    Signature(
        "no-kv-memory",
        r"No available memory for the cache blocks",
        "After loading the weights no GPU memory is left for the KV cache.",
        "raise --kv-cache-memory-bytes (kv_cache_memory) or gpu-memory-utilization, "
        "or free the GPUs (another container may still hold them)",
    ),
    Signature(
        "max-seq-len-does-not-fit",
        r"To serve at least one request with the model's max seq len",
        "The KV cache cannot hold one request of max-model-len tokens.",
        "lower max_model_len (MAX_MODEL_LEN) or raise kv_cache_memory (KV_CACHE_MEMORY)",
    ),
    Signature(
        "memory-held-by-another-process",
        r"is less than desired GPU memory utilization",
        "Another process holds GPU memory, often the previous container that has not released it yet.",
        "wait for the old container to exit (compose-spec up waits for the release), "
        "or stop whatever uses the GPUs (nvidia-smi)",
    ),
    Signature(
        "cuda-oom",
        r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError",
        "The GPU ran out of memory while loading or warming up.",
        "lower kv_cache_memory or max_model_len, or use more GPUs (tensor_parallel_size)",
    ),
    Signature(
        "fa3-not-hopper",
        r"(?i:FA3 is only supported on devices with compute capability|"
        r"FA version 3 is not supported|FlashAttention ?3 .*requires.*Hopper)",
        "FlashAttention 3 is Hopper-only (SM 9.x); Ada (SM 8.9) and Ampere use FA2 via FLASH_ATTN.",
        'remove VLLM_FLASH_ATTN_VERSION=3 and use attention_backend = "flash_attn"',
    ),
    Signature(
        "nccl-shm",
        r"Error while creating shared memory segment /dev/shm/nccl-|ncclSystemError",
        "Tensor parallelism in Docker needs a large /dev/shm for NCCL.",
        "run with ipc: host (the rendered files do) or a large shm_size",
    ),
    Signature(
        "unknown-speculative-method",
        r"validation error for SpeculativeConfig[\s\S]*?literal_error",
        "This vLLM image does not know the speculative method (an older image, or the overlay is missing).",
        "pick a method the image supports, or build the overlay image (make image-dflash2)",
    ),
    Signature(
        "unsupported-architecture",
        r"are not supported for now\. Supported architectures:",
        "This vLLM version does not support the model's architecture.",
        "use a newer vLLM image or a supported model",
    ),
    Signature(
        "max-model-len-too-large",
        r"User-specified max_model_len \(.*\) is greater than the derived max_model_len",
        "max_model_len exceeds what the model's config allows.",
        "lower max_model_len to the model's limit (or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 knowingly)",
    ),
    Signature(
        "non-causal-backend",
        r"does not have non-causal support, which is required for DFlash",
        "DFlash needs an attention backend with non-causal support.",
        "set the drafter's attention_backend to flash_attn (or flex_attention)",
    ),
    Signature(
        "unrecognized-arguments",
        r"error: unrecognized arguments:",
        "The image's vLLM does not know one of the rendered flags (an older image?).",
        "use a vLLM version that has the flag, or remove it from extra_args",
    ),
)


def explain(log: str) -> list[Signature]:
    """Every known signature found in a log, in table order."""
    return [s for s in SIGNATURES if s.matches(log)]


def hints(log: str) -> tuple[str, ...]:
    """One line per matching signature: explanation and fix."""
    return tuple(f"{s.explanation} Fix: {s.fix}." for s in explain(log))
