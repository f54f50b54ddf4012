"""Speculative decoding methods this build accepts (the ``SpeculativeConfig.method`` literal).

One method per line, so an overlay diff can add a method with a one-line change.
"""

from __future__ import annotations

MTP_ALIASES: tuple[str, ...] = (
    "deepseek_mtp",
    "mimo_mtp",
    "glm4_moe_mtp",
    "ernie_mtp",
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
)

SPECULATIVE_METHODS: tuple[str, ...] = (
    "ngram",
    "draft_model",
    "suffix",
    "custom_class",
    "eagle",
    "eagle3",
    "extract_hidden_states",
    "ngram_gpu",
    "mtp",
    *MTP_ALIASES,
    "dspark",
)
