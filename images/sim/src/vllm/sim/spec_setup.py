"""Turn ``--speculative-config`` into the engine's :class:`SpecSetup` (vLLM's checks included)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.config.speculative import SpeculativeConfig, parse_speculative_config
from vllm.sim.engine import SpecSetup
from vllm.sim.logs import VllmLog
from vllm.v1.spec_decode import SpecContext, method_module


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
    return ResolvedSpec(SpecSetup(config.method, k, block_size), config, needs_v2)
