"""What in-server adaptive speculation costs, per variant, and what a hybrid model changes.

The figures are published ones (vLLM issues and PRs), not measured here; `compose-spec
bench --decide` measures them on the rig. Reads the target's config.json only.
"""

from __future__ import annotations

from composer.doctor.model_checks import load_config
from composer.doctor.preflight import Finding, VariantFacts
from composer.stack.model import Stack
from composer.stack.values import MTP_METHODS

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
