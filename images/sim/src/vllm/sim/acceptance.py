"""Deterministic acceptance for speculative iterations.

Position i of the draft is accepted at iteration n when fewer than ``round(n * p_i)`` of the
iterations so far accepted it and every position before it is accepted too (accepted
positions form a prefix). So after any number of iterations each position's count is within
about one of its expectation, and the tokens per iteration are ``1 + sum(p_i)`` from a
request's first iterations on, whatever its prompt: a figure measured over a few requests
is the profile's.

The sequence used to start at a phase hashed from each request: over a request of a few
hundred tokens that phase alone moved tokens per iteration by several percent, and hashing
the prompt's token ids instead of its text (the output became a function of the token
context) reshuffled every prompt's phase, so fixed benchmark prompts drifted from the
profile.
"""

from __future__ import annotations

from collections.abc import Sequence


class AcceptanceSampler:
    """Yields the accepted prefix length for each iteration of one request."""

    def __init__(self, probabilities: Sequence[float]) -> None:
        self._p = tuple(probabilities)
        self._due = [0.5] * len(self._p)  # expected minus accepted, plus one half (rounding)

    def next_accepted(self) -> int:
        """Accepted draft tokens for the next iteration (0..K)."""
        accepted = 0
        for i, p in enumerate(self._p):
            self._due[i] += p
        for due in self._due:
            if due < 1.0:
                break
            accepted += 1
        for i in range(accepted):
            self._due[i] -= 1.0
        return accepted
