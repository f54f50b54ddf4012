"""Human-readable integers as vLLM's command line accepts them."""

from __future__ import annotations

import re

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)\s*$")


def human_readable_int(value: str) -> int:
    """Parse ``4.5G`` (GiB-style, uppercase) or ``128k`` (SI, lowercase) or a plain int.

    Lowercase suffixes are powers of 1000, uppercase ones powers of 1024.
    """
    match = _PATTERN.match(value)
    if not match:
        raise ValueError(f"invalid human-readable integer: {value!r}")
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise ValueError(f"invalid human-readable integer: {value!r}")
        return int(number)
    factor = _BINARY[suffix] if suffix.isupper() else _DECIMAL[suffix]
    return int(float(number) * factor)


def max_model_len(value: str) -> int:
    """Parse ``--max-model-len``: an int, ``128k``-style, or ``auto``/``-1`` (returns -1)."""
    if value.strip().lower() in {"auto", "-1"}:
        return -1
    parsed = human_readable_int(value)
    if parsed <= 0:
        raise ValueError(f"max_model_len must be positive: {value!r}")
    return parsed


def gib(num_bytes: float) -> float:
    """Bytes to GiB."""
    return num_bytes / 2**30
