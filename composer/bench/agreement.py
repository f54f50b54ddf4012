"""Output correctness: determinism and agreement with the baseline's output.

Streaming deltas carry no token ids, so outputs are compared as word pieces (non-space runs
with the whitespace before them, close to a tokenizer's split for prose). Agreement is the
positions where both outputs hold the same piece over the longer one's length (a missing
or extra tail disagrees); over several prompts matches and lengths are summed first. The
first differing position is reported too: in greedy decoding one flipped token changes
everything after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_PIECE = re.compile(r"\s*\S+")


def pieces(text: str) -> list[str]:
    """A text split into word pieces (leading whitespace attached; trailing space dropped)."""
    return _PIECE.findall(text)


@dataclass(frozen=True)
class Agreement:
    """How far an output agrees with a reference output."""

    matched: int
    compared: int
    first_difference: int | None

    @property
    def percent(self) -> float:
        """Matched pieces over compared pieces, in percent (100 for two empty texts)."""
        return 100.0 if self.compared == 0 else 100.0 * self.matched / self.compared


def agreement(output: str, reference: str) -> Agreement:
    """Position-wise piece agreement of `output` with `reference`."""
    out, ref = pieces(output), pieces(reference)
    matched = sum(1 for a, b in zip(out, ref, strict=False) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b), None)
    if first is None and len(out) != len(ref):
        first = min(len(out), len(ref))
    return Agreement(matched, max(len(out), len(ref)), first)


def agreement_with(outputs: Mapping[str, str], reference: Mapping[str, str]) -> Agreement | None:
    """Agreement summed over the prompts both mappings (prompt -> text) have, the earliest
    first difference kept; None if they share none."""
    parts = [agreement(outputs[p], reference[p]) for p in outputs if p in reference]
    if not parts:
        return None
    firsts = [a.first_difference for a in parts if a.first_difference is not None]
    return Agreement(sum(a.matched for a in parts), sum(a.compared for a in parts), min(firsts, default=None))


def deterministic(texts_by_prompt: Mapping[str, Sequence[str]]) -> bool | None:
    """True when every prompt sent more than once gave one text; None if none was repeated."""
    repeated = [texts for texts in texts_by_prompt.values() if len(texts) > 1]
    if not repeated:
        return None
    return all(len(set(texts)) == 1 for texts in repeated)
