"""CPU checks: which speculative methods vLLM's CPU build cannot run (the vllm-cpu image).

A variant runs it when `VLLM_TARGET_DEVICE=cpu` reaches vLLM (`cpu_build`); GPU_DEVICES=none
alone says nothing (the simulator's demo runs every method). vLLM 0.32's CPU build has no
Triton, so its V1 model runner refuses DFlash2 drafts and `dspark` (images/vllm-cpu/README.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer.doctor.preflight import Finding
from composer.errors import CheckpointError
from composer.probes import checkpoints as ckpt
from composer.render.spec import build_spec
from composer.stack.model import Stack, Variant
from composer.stack.values import MTP_METHODS, V2_RUNNER_METHODS

if TYPE_CHECKING:
    import docker

TARGET_DEVICE = "VLLM_TARGET_DEVICE"
CANDIDATE_HEAD_DRAFTS = frozenset({"DFlash2DraftModel", "LiLiCorrDraftModel"})
"""Draft architectures vLLM drafts only in its V2 runner (`_is_dflash_candidate_draft`)."""
CPU_RUNS = frozenset({"ngram", "draft_model"})
"""Methods measured on the CPU build (the tier tests/vllm_cpu)."""
CPU_MTP_RUNS = frozenset({"MiMoForCausalLM"})
"""Target architectures whose `mtp` ran on the CPU build (images/vllm-cpu/captures/mtp.txt)."""
CPU_MTP_FAILS = dict.fromkeys(
    ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
    "vLLM's Qwen3.5 model imports torchvision, which the CPU image leaves out "
    "(`No module named 'torchvision'`)",
)
GPU_HOST_FIX = "run this variant on a GPU host (a CUDA vLLM image and GPU_DEVICES)"


def image_sets_cpu(client: docker.DockerClient | None, image: str) -> bool:
    """Whether a local image sets VLLM_TARGET_DEVICE=cpu (False when absent or unreadable)."""
    if client is None:
        return False
    import docker as docker_sdk

    try:
        env = client.images.get(image).attrs.get("Config", {}).get("Env") or []
    except (docker_sdk.errors.DockerException, OSError):
        return False
    return f"{TARGET_DEVICE}=cpu" in env


def cpu_build(stack: Stack, variant: Variant, client: docker.DockerClient | None) -> str | None:
    """Why `variant` runs vLLM's CPU build (for the finding's text), or None when it does not."""
    env = dict(build_spec(stack, variant).environment)
    if env.get(TARGET_DEVICE, "").lower() == "cpu":
        return f"its environment sets {TARGET_DEVICE}=cpu"
    image = stack.image(variant.image_key)
    if image_sets_cpu(client, image):
        return f"image {image} sets {TARGET_DEVICE}=cpu"
    if stack.gpus is None:
        for other in sorted(set(stack.images.values()) - {image}):
            if image_sets_cpu(client, other):
                return f"GPU_DEVICES=none and the stack's image {other} sets {TARGET_DEVICE}=cpu"
    return None


def _architectures(directory: str, *, dflash: bool = False) -> tuple[str, ...]:
    """A checkpoint's `architectures`; none when its config cannot be read or, with `dflash`,
    has no `dflash_config` (a DFlash draft's)."""
    try:
        config = ckpt.read_config(directory)
    except CheckpointError:
        return ()
    found = config.get("architectures")
    if (dflash and not ckpt.has_dflash_config(config)) or not isinstance(found, list):
        return ()
    return tuple(str(a) for a in found)


def check_cpu_method(stack: Stack, variant: Variant, client: docker.DockerClient | None) -> Finding | None:
    """On vLLM's CPU build: fail for methods it refuses, warn for ones not run there, ok for MTP
    on an architecture that ran; None for variants without speculation or off the CPU build."""
    spec = variant.speculative
    if spec is None:
        return None
    why = cpu_build(stack, variant, client)
    if why is None:
        return None
    name, method = "cpu-method", spec.method
    where = f"method {method} on vLLM's CPU build ({why})"
    if method in CPU_RUNS:
        return Finding(name, "ok", f"method {method} runs on vLLM's CPU build ({why})")
    if method == "dspark":
        return Finding(
            name,
            "fail",
            f"{where}: only vLLM's Model Runner V2 drafts it, which needs Triton; the CPU build has none "
            "and refuses it (`Model Runner V1 does not support: dspark speculative decoding`)",
            GPU_HOST_FIX,
        )
    if method in V2_RUNNER_METHODS:
        drafts = _architectures(stack.draft_dir, dflash=True) if spec.draft_model else ()
        if drafts and not CANDIDATE_HEAD_DRAFTS.intersection(drafts):
            return Finding(
                name,
                "warn",
                f"{where} with a {', '.join(drafts)} draft: vLLM's V1 runner drafts it (DFlashProposer); "
                "not run on CPU here",
                "check a completion on the CPU build before relying on it",
            )
        return Finding(
            name,
            "fail",
            f"{where}: DFlash2 drafts (candidate heads) need vLLM's GPU Model Runner V2, which needs "
            "Triton; the CPU build has none and refuses them (`Model Runner V1 does not support: DFlash "
            "candidate-head drafts`)",
            GPU_HOST_FIX,
        )
    if method in MTP_METHODS:
        targets = _architectures(stack.model_dir)
        failing = [CPU_MTP_FAILS[a] for a in targets if a in CPU_MTP_FAILS]
        if failing:
            return Finding(name, "fail", f"{where}: {failing[0]}", GPU_HOST_FIX)
        if CPU_MTP_RUNS.intersection(targets):
            return Finding(name, "ok", f"{where}: {targets[0]} MTP runs there")
        shown = ", ".join(targets) or "an unreadable checkpoint"
        return Finding(
            name,
            "warn",
            f"{where} with {shown}: MTP ran on CPU only with {', '.join(sorted(CPU_MTP_RUNS))}",
            "check a completion on the CPU build before relying on it",
        )
    return None
