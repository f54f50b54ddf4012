"""Turn ``--speculative-config`` into the engine's :class:`SpecSetup` (vLLM's checks included)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.config.speculative import SpeculativeConfig, parse_speculative_config
from vllm.sim.engine import SpecSetup
from vllm.sim.logs import VllmLog
from vllm.v1.spec_decode import SpecContext, method_module
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

ADAPTIVE_NEEDS_FULL_GRAPHS = (
    "Adaptive verification requires full CUDA graphs. Use cudagraph mode FULL, "
    "FULL_DECODE_ONLY, or FULL_AND_PIECEWISE, or disable adaptive verification."
)
DYNAMIC_SD_PIECEWISE = (
    "Dynamic speculative decoding changes the target verification length at runtime. "
    "Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE for reliability. "
    "Use VLLM_USE_V2_MODEL_RUNNER=1 if you want to use full CUDA graphs."
)


@dataclass(frozen=True)
class Runtime:
    """Engine-wide facts the speculative checks depend on."""

    v2_runner_env: str | None = None  # VLLM_USE_V2_MODEL_RUNNER as set ("1", "0" or unset)
    enforce_eager: bool = False
    hybrid: bool = False


@dataclass(frozen=True)
class ResolvedSpec:
    """The engine setup plus facts boot needs."""

    setup: SpecSetup
    config: SpeculativeConfig | None = None
    needs_v2_runner: bool = False

    @property
    def has_draft_model(self) -> bool:
        return self.config is not None and bool(self.config.model)


def resolve_spec(
    raw: dict[str, Any] | None,
    target_config: dict[str, Any],
    attention_backend: str,
    log: VllmLog,
    runtime: Runtime | None = None,
) -> ResolvedSpec:
    """Validate and resolve; raises ``ValidationError``/``ValueError`` with vLLM's text."""
    if raw is None:
        return ResolvedSpec(SpecSetup())
    config = parse_speculative_config(raw)
    if config.requested_method != config.method:
        log.warning(
            "speculative.py:363",
            f"method `{config.requested_method}` is deprecated and replaced with {config.method}.",
        )
    context = SpecContext(
        target_config, attention_backend, lambda msg: log.warning("speculative.py:420", msg)
    )
    module = method_module(config.method)
    validate = getattr(module, "validate", None)
    if validate is not None:
        validate(config, context)
    k = config.num_speculative_tokens
    if k is None:
        default = getattr(module, "default_num_speculative_tokens", None)
        if default is None:
            raise ValueError("num_speculative_tokens was provided but without speculative model.")
        k = int(default(context))
    block_fn = getattr(module, "draft_block_size", None)
    block_size = int(block_fn(config, context)) if block_fn is not None else None
    needs_v2 = bool(getattr(module, "NEEDS_V2_MODEL_RUNNER", False))
    runtime = runtime or Runtime()
    raw_schedule = config.extra.get("num_speculative_tokens_per_batch_size")
    schedule = None if raw_schedule is None else validate_and_normalize_dynamic_sd_schedule(raw_schedule)
    adaptive = bool(config.extra.get("enable_adaptive_verification"))
    if adaptive:
        if runtime.v2_runner_env == "0":
            raise ValueError("Model Runner V1 does not support: adaptive draft verification")
        if runtime.enforce_eager:
            raise ValueError(ADAPTIVE_NEEDS_FULL_GRAPHS)
        needs_v2 = True
    v2 = needs_v2 or runtime.v2_runner_env == "1"
    piecewise = schedule is not None and not v2 and not runtime.enforce_eager
    if piecewise:
        log.warning("vllm.py:1049", DYNAMIC_SD_PIECEWISE)
    setup = SpecSetup(config.method, k, block_size, schedule, adaptive, piecewise, runtime.hybrid)
    return ResolvedSpec(setup, config, needs_v2)
