"""Checkpoint checks: the target's config.json, its MTP depth, the DFlash draft and its K;
what in-server adaptive speculation costs per variant, and what a hybrid model changes (the
figures are published ones, from vLLM issues and PRs; `compose-spec bench --decide`
measures them on the rig)."""

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
    if k != block - 1:
        over = k > block - 1
        return Finding(
            "draft-k",
            "fail" if over else "warn",
            f"K={k} exceeds the draft's trained block: block_size {block} allows K up to {block - 1}"
            if over
            else f"K={k} but the draft was trained with block_size {block} (best start: K = block_size - 1)",
            f"set num_speculative_tokens = {block - 1} (NUM_SPECULATIVE_TOKENS={block - 1})",
        )
    return Finding("draft-k", "ok", f"K={k} = block_size {block} - 1")


DSD_COSTS = (
    "on vLLM's V1 model runner a K schedule forces piecewise CUDA graphs: -14% single stream "
    "(vllm#49548: 59.6 -> 50.0 tok/s), aggregate collapsed at the schedule's threshold in that "
    "report (8 requests: 232 tok/s static vs 24-157), and a K=0 step still costs +6.6% TPOT at "
    "concurrency 2 and +21.6% at 189 against a server without speculation (same thread); "
    "VLLM_USE_V2_MODEL_RUNNER=1 keeps full CUDA graphs"
)
ADAPTIVE_COSTS = (
    "adaptive verification (vllm PRs #47808, #52228) runs on the V2 model runner with full "
    "CUDA graphs; published gains +15% to +22% at concurrency 64 with DFlash2 on datacenter "
    "GPUs; SGLang's similar scheme cost 4-8% at concurrency 1-8"
)
HYBRID_MTP = (
    "{model} has linear-attention (GDN) layers: with MTP vLLM reserves an extra state block per "
    "sequence for the drafts and runs only about 3 sequences at batch >= 4 (vllm#55533); no K "
    "schedule gives that memory back, only a variant without speculation does"
)
HYBRID_ADAPTIVE = (
    "{model} has linear-attention (GDN) layers, whose backend does not accept device-decided "
    "query lengths (GDNAttentionBackend is an SSM backend in vLLM 0.32): vLLM refuses adaptive "
    "verification at startup ('Adaptive verification trims verification requests on device, "
    "which the GDNAttentionBackend attention backend does not support')"
)


def is_hybrid(config: dict) -> bool:
    """True when config.json shows linear-attention layers beside full attention."""
    for section in (config.get("text_config") or {}, config):
        types = section.get("layer_types")
        if isinstance(types, list) and "linear_attention" in types:
            return True
        interval = section.get("full_attention_interval")
        if isinstance(interval, int) and interval > 1 and section.get("linear_num_value_heads"):
            return True
    return False


def check_dropped_eager(variant: VariantFacts) -> Finding | None:
    """An adaptive variant that runs without an inherited --enforce-eager (the stack drops it:
    vLLM refuses adaptive verification in eager mode) says so, with the key it came from."""
    if not variant.dropped_args:
        return None
    args = ", ".join(sorted({arg for arg, _ in variant.dropped_args}))
    origins = ", ".join(sorted({origin for _, origin in variant.dropped_args}))
    name = variant.table.removeprefix("variants.")
    return Finding(
        "adaptive-eager",
        "warn",
        f"{name} runs without {args} (inherited from {origins}): adaptive verification needs "
        "full CUDA graphs and vLLM refuses it in eager mode; the graphs take GPU memory and start time",
        f"nothing to do if intended (to state it, give the variant its own "
        f"{variant.table}.extra_args without {args}); adaptive_verification = false keeps "
        "eager mode instead",
    )


def check_refused(variant: VariantFacts) -> Finding | None:
    """A variant vLLM refuses with a stack-wide setting (the stack's attention backend for
    adaptive verification) fails; the stack's other variants are not affected."""
    if not variant.refused:
        return None
    return Finding(
        "adaptive-backend",
        "fail",
        variant.refused,
        "the other variants start as before; this one needs stack.attention_backend "
        "(ATTENTION_BACKEND) flash_attn, triton_attn or flex_attention, or "
        f"{variant.table}.speculative.adaptive_verification = false",
    )


def check_adaptive(stack: Stack, variant: VariantFacts) -> Finding | None:
    """The known costs of a variant's K schedule or adaptive verification, and the hybrid notes."""
    spec = variant.speculative
    if spec is None:
        return None
    schedule, adaptive = spec.per_batch_size is not None, spec.adaptive_verification
    config, _ = load_config(stack.model_dir)
    hybrid = config is not None and is_hybrid(config)
    model = stack.model_dir
    if adaptive and hybrid:
        return Finding(
            "adaptive-speculation",
            "warn",
            HYBRID_ADAPTIVE.format(model=model),
            f"use a static or scheduled variant here; bench --decide before relying on [{variant.table}]",
        )
    if spec.method in MTP_METHODS and hybrid:
        detail = HYBRID_MTP.format(model=model)
        if schedule:
            detail += "; " + DSD_COSTS
        return Finding(
            "adaptive-speculation",
            "warn",
            detail,
            "serve many concurrent requests from a variant without speculation (bench --decide measures it)",
        )
    if not (schedule or adaptive):
        return None
    detail = "; ".join(text for on, text in ((schedule, DSD_COSTS), (adaptive, ADAPTIVE_COSTS)) if on)
    return Finding("adaptive-speculation", "ok", detail)
