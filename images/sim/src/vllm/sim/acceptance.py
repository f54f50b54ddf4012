"""Deterministic acceptance sampling for speculative iterations.

Iteration n draws ``u_n = frac(u_0 + n * phi)`` (a Weyl sequence: equidistributed, so the
empirical per-position fractions track p_i closely even over a short request) and accepts
the prefix of positions with ``u_n < p_i``. ``u_0`` comes from a hash of the seed and the
request, so the same seed and the same request give the same acceptance sequence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

_PHI = 0.6180339887498949


def start_offset(*parts: object) -> float:
    """A reproducible number in [0, 1) from the given parts."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class AcceptanceSampler:
    """Yields the accepted prefix length for each iteration of one request."""

    def __init__(self, probabilities: Sequence[float], offset: float) -> None:
        self._p = tuple(probabilities)
        self._u = offset
        self._n = 0

    def next_accepted(self) -> int:
        """Accepted draft tokens for the next iteration (0..K)."""
        u = (self._u + self._n * _PHI) % 1.0
        self._n += 1
        accepted = 0
        for p in self._p:
            if u >= p:
                break
            accepted += 1
        return accepted
