"""Timing profiles: the numbers the simulator's timing model is calibrated on.

A profile holds the plain-decode rate, the prefill rate and, per speculative method,
per-K tables of per-position acceptance and of iteration cost. Built-in profiles are
calibrated on single-stream, warm, temperature-0 measurements; a JSON file with the same
shape (see images/sim/README.md) can replace or extend them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

DEFAULT_PROFILE = "qwen3.8-27b"
GENERIC_METHOD = "default"


@dataclass(frozen=True)
class MethodProfile:
    """Calibration of one speculative method.

    ``acceptance`` maps K to the per-position unconditional acceptance fractions p_0..p_{K-1}
    (fraction of drafts whose position i was accepted). ``tok_s`` maps K to a measured decode
    rate, from which the iteration cost is derived; ``iteration_ms`` gives that cost directly
    (it wins where both name the same K). ``block_size``/``block_mismatch_decay`` model a
    drafter trained on a fixed block: acceptance is multiplied by ``decay`` per unit of
    ``|K + 1 - block_size|`` beyond the mismatch present in the calibration.
    """

    acceptance: Mapping[int, tuple[float, ...]]
    tok_s: Mapping[int, float] = field(default_factory=dict)
    iteration_ms: Mapping[int, float] = field(default_factory=dict)
    tail_ratio: float = 0.75
    block_size: int | None = None
    block_mismatch_decay: float = 1.0
    draft_ms_per_token: float = 0.2


@dataclass(frozen=True)
class BatchProfile:
    """How the cost of one engine step grows with the batch (assumptions, not measurements).

    A step runs every running request at once. Its target forward pass over ``n`` decode
    tokens (one per plain sequence, ``K + 1`` per speculative sequence) costs the batch-1
    step (``1 / baseline_tok_s``) plus ``memory_ms_per_token`` per extra token (the
    memory-bound region: the weights are read once per step whatever the batch), plus
    ``compute_ms_per_token`` per token beyond ``compute_knee_tokens`` (the compute-bound
    region). Prefill tokens cost ``1 / prefill_tok_s`` each in the same step. A step
    holds at most ``max_num_batched_tokens`` tokens (longer prompts are prefilled in
    chunks) and ``max_num_seqs`` sequences (vLLM's flags of the same names win).
    """

    memory_ms_per_token: float = 0.05
    compute_knee_tokens: int = 16
    compute_ms_per_token: float = 1.07
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256


@dataclass(frozen=True)
class Profile:
    """Everything the timing model needs for one target model on one machine."""

    name: str
    baseline_tok_s: float
    prefill_tok_s: float
    ttft_overhead_ms: float
    methods: Mapping[str, MethodProfile]
    batching: BatchProfile = field(default_factory=BatchProfile)

    def method(self, name: str) -> MethodProfile:
        """The calibration for ``name``, falling back to the generic one."""
        if name in self.methods:
            return self.methods[name]
        if GENERIC_METHOD in self.methods:
            return self.methods[GENERIC_METHOD]
        raise KeyError(f"profile {self.name!r} has no calibration for method {name!r}")


_GENERIC = MethodProfile(
    acceptance={4: (0.55, 0.35, 0.22, 0.14)},
    iteration_ms={1: 38.0, 8: 52.0},
)

QWEN3_8_27B = Profile(
    name="qwen3.8-27b",
    baseline_tok_s=29.4,
    prefill_tok_s=4000.0,
    ttft_overhead_ms=40.0,
    methods={
        "dflash": MethodProfile(
            acceptance={
                1: (0.87,),
                3: (0.83, 0.65, 0.50),
                4: (0.76, 0.60, 0.48, 0.40),
                7: (0.77, 0.60, 0.50, 0.42, 0.29, 0.19, 0.15),
                10: (0.69, 0.55, 0.43, 0.37, 0.27, 0.18, 0.13, 0.10, 0.07, 0.05),
            },
            tok_s={1: 34.0, 3: 49.0, 4: 50.0, 7: 58.5, 10: 55.5},
            block_size=8,
            block_mismatch_decay=0.93,
        ),
        "mtp": MethodProfile(
            acceptance={
                7: (0.87, 0.79, 0.69, 0.54, 0.44, 0.28, 0.21),
                12: (0.82, 0.72, 0.62, 0.56, 0.42, 0.30, 0.20, 0.14, 0.10, 0.07, 0.05, 0.03),
            },
            tok_s={7: 59.2, 12: 52.8},
        ),
        GENERIC_METHOD: _GENERIC,
    },
)

QWEN3_5_2B = Profile(
    name="qwen3.5-2b",
    baseline_tok_s=116.0,
    prefill_tok_s=20000.0,
    ttft_overhead_ms=15.0,
    methods={
        "mtp": MethodProfile(
            acceptance={
                1: (0.60,),
                3: (0.55, 0.33, 0.20),
                5: (0.50, 0.26, 0.15, 0.09, 0.05),
            },
            tok_s={1: 133.5, 3: 120.6, 5: 91.1},
            tail_ratio=0.5,
            draft_ms_per_token=0.05,
        ),
        GENERIC_METHOD: MethodProfile(
            acceptance={4: (0.50, 0.30, 0.18, 0.10)},
            iteration_ms={1: 10.5, 8: 22.0},
            draft_ms_per_token=0.05,
        ),
    },
    # The 27B values scaled by the ratio of the batch-1 step times (8.6 / 34 ms).
    batching=BatchProfile(memory_ms_per_token=0.0125, compute_ms_per_token=0.27),
)

BUILTIN_PROFILES: dict[str, Profile] = {p.name: p for p in (QWEN3_8_27B, QWEN3_5_2B)}


def get_profile(name: str | None = None) -> Profile:
    """A built-in profile by name (default: the 27B reference machine)."""
    key = (name or DEFAULT_PROFILE).lower()
    try:
        return BUILTIN_PROFILES[key]
    except KeyError:
        allowed = ", ".join(sorted(BUILTIN_PROFILES))
        raise ValueError(f"unknown SIM_PROFILE {name!r}; allowed: {allowed}") from None


def _int_keys(table: Mapping[str, Any], convert: Any) -> dict[int, Any]:
    return {int(k): convert(v) for k, v in table.items()}


def method_from_dict(data: Mapping[str, Any]) -> MethodProfile:
    """Build a :class:`MethodProfile` from its JSON form (string keys for K)."""
    return MethodProfile(
        acceptance=_int_keys(data["acceptance"], lambda v: tuple(float(x) for x in v)),
        tok_s=_int_keys(data.get("tok_s", {}), float),
        iteration_ms=_int_keys(data.get("iteration_ms", {}), float),
        tail_ratio=float(data.get("tail_ratio", 0.75)),
        block_size=int(data["block_size"]) if data.get("block_size") else None,
        block_mismatch_decay=float(data.get("block_mismatch_decay", 1.0)),
        draft_ms_per_token=float(data.get("draft_ms_per_token", 0.2)),
    )


def batching_from_dict(data: Mapping[str, Any], base: BatchProfile | None = None) -> BatchProfile:
    """Override fields of ``base`` (default: the reference values) from a mapping."""
    base = base or BatchProfile()
    known = {f.name: f.type for f in fields(BatchProfile)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown batching key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for key, raw in data.items():
        number = float(raw)
        values[key] = int(number) if known[key] == "int" else number
        if values[key] < 0 or (known[key] == "int" and values[key] < 1):
            raise ValueError(f"batching {key} must be positive, got {raw!r}")
    return replace(base, **values)


def parse_batching_env(raw: str) -> dict[str, str]:
    """``SIM_BATCHING="compute_ms_per_token=0.8,compute_knee_tokens=32"`` as a mapping."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"SIM_BATCHING item {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def profile_from_dict(data: Mapping[str, Any]) -> Profile:
    """Build a profile from JSON data; ``"base"`` names a built-in profile to extend."""
    base = get_profile(data.get("base")) if data.get("base") else None
    methods = dict(base.methods) if base else {}
    for name, method in data.get("methods", {}).items():
        methods[name] = method_from_dict(method)
    values: dict[str, Any] = {"methods": methods, "name": data.get("name", "custom")}
    for key in ("baseline_tok_s", "prefill_tok_s", "ttft_overhead_ms"):
        if key in data:
            values[key] = float(data[key])
    if "batching" in data:
        values["batching"] = batching_from_dict(data["batching"], base.batching if base else None)
    if base is not None:
        return replace(base, **values)
    missing = [k for k in ("baseline_tok_s", "prefill_tok_s", "ttft_overhead_ms") if k not in values]
    if missing:
        raise ValueError(f"profile without 'base' must set {', '.join(missing)}")
    return Profile(**values)


def load_profile_file(path: str | Path) -> Profile:
    """Read a JSON profile file."""
    with open(path, encoding="utf-8") as handle:
        return profile_from_dict(json.load(handle))


def resolve_profile(name: str | None, path: str | None, batching: str | None = None) -> Profile:
    """The profile selected by SIM_PROFILE_FILE (wins) or SIM_PROFILE, then SIM_BATCHING."""
    profile = load_profile_file(path) if path else get_profile(name)
    if batching:
        profile = replace(
            profile, batching=batching_from_dict(parse_batching_env(batching), profile.batching)
        )
    return profile
