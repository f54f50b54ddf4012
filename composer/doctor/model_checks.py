"""Checkpoint checks: the target's config.json, its MTP depth, the DFlash draft and its K."""

from __future__ import annotations

from composer.doctor.preflight import Finding, VariantFacts
from composer.errors import CheckpointError
from composer.probes import checkpoints as ckpt
from composer.stack.model import Stack
from composer.stack.values import MTP_METHODS, V2_RUNNER_METHODS


def load_config(directory: str) -> tuple[dict | None, str]:
    """A checkpoint's config.json, or None and the reason."""
    try:
        return ckpt.read_config(directory), ""
    except CheckpointError as err:
        return None, str(err)


def check_model_config(stack: Stack) -> Finding:
    """The target model directory has a readable config.json (and safetensors to size it)."""
    config, error = load_config(stack.model_dir)
    if config is None:
        return Finding("model-config", "fail", error, "set MODEL_DIR to a Hugging Face checkpoint directory")
    model_type = config.get("model_type") or "?"
    try:
        shards = ckpt.shard_files(stack.model_dir)
    except CheckpointError as err:
        return Finding("model-config", "warn", f"model_type {model_type}; {err}", "repair the index file")
    if not shards:
        detail = f"{stack.model_dir}/config.json is readable (model_type {model_type}), no *.safetensors"
        if stack.gpus is None:
            return Finding("model-config", "ok", detail + " (no GPU: fine for the simulator demo)")
        return Finding(
            "model-config",
            "warn",
            detail + ": vLLM cannot load it and the weights cannot be sized",
            "point MODEL_DIR at the full checkpoint",
        )
    return Finding(
        "model-config",
        "ok",
        f"{stack.model_dir}: model_type {model_type}, {len(shards)} safetensors shard(s), "
        f"{ckpt.mtp_layers(config)} MTP layer(s)",
    )


def check_mtp(stack: Stack, variant: VariantFacts) -> Finding | None:
    """An MTP variant needs MTP layers; K above the layer count must be a multiple of it
    (vLLM refuses the rest at startup: 'must be divisible by n_predict=')."""
    spec = variant.speculative
    if spec is None or spec.method not in MTP_METHODS:
        return None
    config, error = load_config(stack.model_dir)
    if config is None:
        return Finding("mtp-layers", "warn", f"not checked: {error}", "fix the model-config check first")
    layers, k = ckpt.mtp_layers(config), spec.num_speculative_tokens
    if layers == 0:
        return Finding(
            "mtp-layers",
            "fail",
            f"method {spec.method} but {stack.model_dir}/config.json has no mtp_num_hidden_layers "
            "(top level or text_config): the model has no MTP head",
            f"use a draft-model method (e.g. dflash) or drop [{variant.table}.speculative]",
        )
    if k > layers and k % layers:
        lower, upper = (k // layers) * layers, (k // layers + 1) * layers
        return Finding(
            "mtp-layers",
            "fail",
            f"K={k} is larger than mtp_num_hidden_layers={layers} and not divisible by it: vLLM "
            f"refuses it at startup ('must be divisible by n_predict={layers}')",
            f"set num_speculative_tokens to {lower} or {upper} (NUM_SPECULATIVE_TOKENS)",
        )
    return Finding("mtp-layers", "ok", f"{layers} MTP layer(s); K={k} is compatible")


def check_draft_config(stack: Stack, variant: VariantFacts) -> Finding | None:
    """A draft-model variant's DRAFT_DIR has config.json; DFlash drafts carry dflash_config."""
    spec = variant.speculative
    if spec is None or not spec.draft_model:
        return None
    config, error = load_config(stack.draft_dir)
    if config is None:
        return Finding("draft-config", "fail", error, "set DRAFT_DIR to the draft checkpoint directory")
    if spec.method in V2_RUNNER_METHODS and not ckpt.has_dflash_config(config):
        return Finding(
            "draft-config",
            "fail",
            f"{stack.draft_dir}/config.json has no dflash_config: "
            f"not a DFlash draft for method {spec.method}",
            "point DRAFT_DIR at a DFlash/DFlash2 draft checkpoint",
        )
    detail = f"{stack.draft_dir}: model_type {config.get('model_type', '?')}"
    try:
        shards = ckpt.shard_files(stack.draft_dir)
    except CheckpointError as err:
        return Finding("draft-config", "warn", f"{detail}; {err}", "repair the draft's index file")
    if not shards and stack.gpus is not None:
        return Finding(
            "draft-config",
            "warn",
            f"{detail}, but no *.safetensors: vLLM cannot load the drafter",
            "point DRAFT_DIR at the full draft checkpoint",
        )
    return Finding("draft-config", "ok", detail + ("" if shards else ", no weights (simulator demo)"))


def check_draft_k(stack: Stack, variant: VariantFacts) -> Finding | None:
    """A DFlash variant's K may not exceed the draft's trained block (block_size - 1) and
    is best equal to it: a larger K drafts past what the drafter was trained to fill."""
    spec = variant.speculative
    if spec is None or not spec.draft_model or spec.method not in V2_RUNNER_METHODS:
        return None
    config, _ = load_config(stack.draft_dir)
    if config is None:
        return None  # draft-config already fails
    block, k = ckpt.dflash_block_size(config), spec.num_speculative_tokens
    if block is None:
        return Finding(
            "draft-k",
            "warn",
            "dflash_config has no block_size: K cannot be checked against the trained block",
            "read the draft's model card for its block size",
        )
    if k > block - 1:
        return Finding(
            "draft-k",
            "fail",
            f"K={k} exceeds the draft's trained block: block_size {block} allows K up to {block - 1}",
            f"set num_speculative_tokens = {block - 1} (NUM_SPECULATIVE_TOKENS={block - 1})",
        )
    if k != block - 1:
        return Finding(
            "draft-k",
            "warn",
            f"K={k} but the draft was trained with block_size {block} (best start: K = block_size - 1)",
            f"set num_speculative_tokens = {block - 1} (NUM_SPECULATIVE_TOKENS={block - 1})",
        )
    return Finding("draft-k", "ok", f"K={k} = block_size {block} - 1")
