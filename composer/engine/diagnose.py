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
        "pick a method the image supports, or build the overlay image (compose-spec build dflash2)",
    ),
    Signature(
        "invalid-speculative-config",
        r"validation error for SpeculativeConfig\s*\n(?:\(\w+ pid=\d+\))?\s*Value error,",
        "vLLM rejected a key or value of the speculative config (the line after "
        "'validation error for SpeculativeConfig' names it).",
        "correct the variant's [speculative] table, e.g. draft_tensor_parallel_size instead of "
        "tensor_parallel_size in speculative.extra",
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
        "access-log-flag-unknown",
        r"unrecognized arguments:.*--disable-access-log-for-endpoints",
        "This vLLM (older than 0.13) has no --disable-access-log-for-endpoints, which the rendered "
        "files pass to keep the gateway's probes out of the access log.",
        "set log_probes = true under [stack] (or --set stack.log_probes=true) and render again, "
        "or use a newer vLLM image",
    ),
    Signature(
        "unrecognized-arguments",
        r"error: unrecognized arguments:",
        "The image's vLLM does not know one of the rendered flags (an older image?).",
        "use a vLLM version that has the flag, or remove it from extra_args",
    ),
    Signature(
        "model-not-first-positional",
        r"`model` should be provided as the first positional argument",
        "vLLM serve needs the model path as its first argument, before any flag.",
        "do not pass the model in extra_args; set stack.model_path (MODEL_DIR) instead",
    ),
    Signature(
        "sleep-mode-unsupported",
        r"Sleep mode is not supported on current platform",
        "This vLLM build (the CPU build, for one) has no sleep mode.",
        "remove --enable-sleep-mode from extra_args",
    ),
    Signature(
        "cpu-attention-unsupported",
        r"Unsupported CPU attention configuration",
        "vLLM's CPU attention has no kernel for the model's head_dim on this CPU: "
        "the server passes /health and the engine dies on the first request.",
        "serve a model whose head_dim the CPU build supports, or run it on a GPU",
    ),
    Signature(
        "worker-illegal-instruction",
        r"Worker proc \S+ died unexpectedly \(exit code: -4\)",
        "The worker died of an illegal instruction: a CPU kernel (bfloat16 on AMX, often in "
        "virtual machines that report AMX without granting it) is not usable here.",
        'pass --dtype float32 in extra_args (extra_args = ["--dtype", "float32"])',
    ),
    Signature(
        "shm-too-small",
        r"Insufficient space in /dev/shm",
        "vLLM's engine and workers share memory through /dev/shm, which is too small in the container.",
        "run with ipc: host (the rendered files do) or a larger shm_size",
    ),
    Signature(
        "cpu-memory-held",
        r"is less than desired CPU memory utilization",
        "With no KV cache size given, vLLM's CPU build takes a share of host RAM, and too little is free.",
        'set kv_cache_memory (e.g. "256MiB") on the variant, or free host memory',
    ),
    Signature(
        "cuda-illegal-memory-access",
        r"CUDA error: an illegal memory access was encountered|cudaErrorIllegalAddress",
        "A CUDA kernel read or wrote outside its memory and the engine died with it; in vLLM this "
        "is most often a speculative-decoding or attention kernel that fails for this K or this "
        "attention backend (EngineDeadError and 500s follow).",
        "lower the variant's K (speculative.num_speculative_tokens), or set a different "
        'attention_backend (e.g. "flash_attn" or "triton_attn"); CUDA_LAUNCH_BLOCKING=1 in the '
        "variant's env names the failing kernel",
    ),
    Signature(
        "cuda-launch-failure",
        r"CUDA error: unspecified launch failure|cudaErrorLaunchFailure",
        "A CUDA kernel failed to launch: usually the NVIDIA driver and the image's CUDA runtime "
        "do not fit each other (a driver older than the image's CUDA needs), or a GPU is in a "
        "bad state (nvidia-smi shows ERR!).",
        "compare the driver's CUDA version (nvidia-smi) with the image's CUDA, then use an image "
        "built for that CUDA or upgrade the driver; reset or reboot a GPU that shows ERR!",
    ),
    Signature(
        "engine-dead",
        r"EngineDeadError|MQLLMEngine is already dead",
        "The engine core died; the API server answers 500 to every request until the "
        "container is restarted. The root cause is the first ERROR above it.",
        "read the lines above EngineDeadError (compose-spec logs --failed --explain after a failed "
        "swap, compose-spec logs --explain for the running variant); a CUDA error there "
        "names the fix, else restart the variant with clients held "
        "(compose-spec up VARIANT --force-recreate)",
    ),
    Signature(
        "engine-core-init-failed",
        r"Engine core initialization failed\. See root cause above",
        "The engine core failed to start; its root cause is printed earlier in the log.",
        "read the full log for the first ERROR line (compose-spec logs --failed after a failed "
        "swap, compose-spec logs for the running variant)",
    ),
)


def explain(log: str) -> list[Signature]:
    """Every known signature found in a log, in table order."""
    return [s for s in SIGNATURES if re.search(s.pattern, log)]


def hints(log: str) -> tuple[str, ...]:
    """One line per matching signature: explanation and fix."""
    return tuple(f"{s.explanation} Fix: {s.fix}." for s in explain(log))
