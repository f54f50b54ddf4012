"""Multi-token prediction with the target model's own MTP layers."""

from __future__ import annotations

from typing import Any

from vllm.v1.spec_decode import SpecContext

NEEDS_V2_MODEL_RUNNER = False


def n_predict(target_config: dict[str, Any]) -> int:
    """MTP depth from the target config (``text_config.mtp_num_hidden_layers``), default 1."""
    for section in (target_config.get("text_config") or {}, target_config):
        for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers"):
            value = section.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 1


def validate(config: Any, context: SpecContext) -> None:
    """K above the MTP depth must be a multiple of it."""
    depth = n_predict(context.target_config)
    k = config.num_speculative_tokens
    if k is not None and k > depth and k % depth != 0:
        raise ValueError(f"num_speculative_tokens:{k} must be divisible by n_predict={depth}")


def default_num_speculative_tokens(context: SpecContext) -> int:
    """vLLM uses the MTP depth when K is not given."""
    return n_predict(context.target_config)
