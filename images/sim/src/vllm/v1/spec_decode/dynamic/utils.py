"""Validate ``num_speculative_tokens_per_batch_size`` with vLLM's messages.

vLLM (``vllm/v1/spec_decode/dynamic/utils.py``) accepts inclusive ``(start, end, K)``
ranges, sorts them, refuses overlaps and a first range not starting at 1, and carries the
previous K through gaps and past the last range.
"""

from __future__ import annotations

Schedule = tuple[tuple[int, int, int], ...]


def validate_and_normalize_dynamic_sd_schedule(raw: object) -> Schedule:
    """The sorted schedule, or ValueError with vLLM's text."""
    if raw is None:
        raise ValueError(
            "num_speculative_tokens_per_batch_size is required for dynamic speculative decoding."
        )
    if not isinstance(raw, list):
        raise ValueError(
            "num_speculative_tokens_per_batch_size must be a non-empty list of "
            "(range_start, range_end, num_speculative_tokens) entries."
        )
    if not raw:
        raise ValueError("num_speculative_tokens_per_batch_size must not be empty.")
    parsed: list[tuple[int, int, int]] = []
    for entry in raw:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise ValueError(
                "Each num_speculative_tokens_per_batch_size entry must be a "
                "3-item sequence: (range_start, range_end, num_speculative_tokens)."
            )
        start, end, k = (int(x) for x in entry)
        if start <= 0 or end <= 0:
            raise ValueError(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise ValueError(f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
        if k < 0:
            raise ValueError("num_speculative_tokens_per_batch_size values must be >= 0.")
        parsed.append((start, end, k))
    parsed.sort(key=lambda entry: entry[0])
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise ValueError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if parsed[0][0] != 1:
        raise ValueError(
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule."
        )
    return tuple(parsed)
