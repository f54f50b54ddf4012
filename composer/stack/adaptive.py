"""In-server adaptive speculation: vLLM's batch-size K schedule
(`num_speculative_tokens_per_batch_size`: inclusive `[start_bs, end_bs, K]` ranges, K=0
allowed) and `enable_adaptive_verification`. Stricter than vLLM (no gaps, no K above
`num_speculative_tokens`), so the schedule that runs is the one written; checks raise ValueError.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from composer.stack import values as v

Schedule = tuple[tuple[int, int, int], ...]

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
ADAPTIVE_KEY = "enable_adaptive_verification"
REMOVED_KEYS = frozenset({"speculative_disable_by_batch_size", "disable_by_batch_size"})
"""Did nothing since vLLM v0.10 and were removed (vllm PR #35060): never rendered."""
V2_RUNNER_VAR = "VLLM_USE_V2_MODEL_RUNNER"
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default below 70 GiB per GPU (RTX 4090, A100); H100/H200 get 1024
EAGER_FLAGS = ("--enforce-eager", "--enforce_eager")
ADAPTIVE_REFUSED_BACKENDS = {
    "FLASHINFER": "FlashInfer plans decode from the CPU query lengths except trtllm-gen on SM100",
}
"""Target attention backends that refuse device-decided query lengths (so do SSM layers)."""

SCHEDULE_HELP = (
    "a list of [start_bs, end_bs, K] with inclusive batch-size ranges, ordered, "
    "non-overlapping, covering 1..max_num_seqs without gaps, each K from 0 to "
    "num_speculative_tokens, e.g. [[1, 2, 7], [3, 8, 3], [9, 512, 0]]"
)


def _int(raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"{SCHEDULE_HELP} (got {v.shown(raw)}, not a whole number)")
    return raw


def parse_schedule(raw: object, max_k: int, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> Schedule:
    """A validated K schedule: ranges start at 1, follow each other and reach max_num_seqs."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(SCHEDULE_HELP)
    schedule: list[tuple[int, int, int]] = []
    for entry in raw:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise ValueError(f"{SCHEDULE_HELP} (entry {v.shown(entry)} is not [start_bs, end_bs, K])")
        start, end, k = (_int(x) for x in entry)
        if start < 1 or end < start:
            raise ValueError(f"{SCHEDULE_HELP} (range {start}..{end} is empty or below 1)")
        if not 0 <= k <= max_k:
            raise ValueError(
                f"{SCHEDULE_HELP} (K={k} for {start}..{end} is outside 0..{max_k}, "
                f"num_speculative_tokens being the maximum)"
            )
        expected = schedule[-1][1] + 1 if schedule else 1
        if start != expected:
            what = "overlaps or is out of order" if start < expected else "leaves a gap"
            raise ValueError(
                f"{SCHEDULE_HELP} (range {start}..{end} {what}: expected it to start at {expected})"
            )
        schedule.append((start, end, k))
    if schedule[-1][1] < max_num_seqs:
        raise ValueError(
            f"{SCHEDULE_HELP} (the last range ends at {schedule[-1][1]}, below max_num_seqs "
            f"{max_num_seqs}: extend it, or set --max-num-seqs in extra_args)"
        )
    if all(k == 0 for _, _, k in schedule):
        raise ValueError(f"{SCHEDULE_HELP} (every K is 0: use a variant without speculation)")
    return tuple(schedule)


def schedule_entries(raw: object) -> list:
    """The raw schedule from TOML (a list) or a flag/env value (its JSON text)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as err:
            raise ValueError(f"{SCHEDULE_HELP} (not JSON: {err})") from err
    if not isinstance(raw, list):
        raise ValueError(SCHEDULE_HELP)
    return raw


def max_num_seqs(extra_args: Sequence[str]) -> int:
    """`--max-num-seqs` from a variant's extra arguments, else vLLM's default."""
    for index, arg in enumerate(extra_args):
        name, sep, value = arg.partition("=")
        if name.replace("_", "-") != "--max-num-seqs":
            continue
        if not sep and index + 1 < len(extra_args):
            value = extra_args[index + 1]
        try:
            return v.parse_positive_int(value)
        except ValueError:
            return DEFAULT_MAX_NUM_SEQS
    return DEFAULT_MAX_NUM_SEQS


def split_eager(extra_args: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The extra arguments without vLLM's eager-mode flag, and the flags taken out."""
    kept = tuple(a for a in extra_args if a.partition("=")[0] not in EAGER_FLAGS)
    dropped = tuple(a for a in extra_args if a.partition("=")[0] in EAGER_FLAGS)
    return kept, dropped


def adaptive_problem(extra_args: Sequence[str], env: dict[str, str]) -> str | None:
    """Why adaptive verification cannot start with a variant's own settings (None when it can)."""
    if any(arg.partition("=")[0] in EAGER_FLAGS for arg in extra_args):
        return (
            "adaptive verification needs full CUDA graphs and vLLM refuses it with --enforce-eager: "
            "remove it from this variant's extra_args (one inherited through extends is dropped for you), "
            "or set adaptive_verification = false"
        )
    if env.get(V2_RUNNER_VAR, "1") != "1":
        return (
            f"adaptive verification runs only on vLLM's V2 model runner: {V2_RUNNER_VAR} must be 1 "
            f"(got {env[V2_RUNNER_VAR]!r}); remove it from env, it is set for you"
        )
    return None


def backend_problem(attention_backend: str) -> str | None:
    """Why adaptive verification cannot start with the stack's attention backend (None when it can)."""
    reason = ADAPTIVE_REFUSED_BACKENDS.get(attention_backend.upper())
    if reason:
        allowed = "flash_attn, triton_attn or flex_attention"
        return (
            f"adaptive verification needs an attention backend that accepts device-decided query "
            f"lengths; {attention_backend} does not ({reason}): use {allowed}"
        )
    return None
