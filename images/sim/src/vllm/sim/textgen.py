"""Deterministic tokenization and text generation.

A prompt token is about four characters. Generated tokens are words drawn from a fixed
vocabulary by a hash of (prompt, position[, sampling seed]), so the same prompt at
temperature 0 always yields the same text.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Mapping

CHARS_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_FIXED = 3

_VOCAB = [
    "the",
    "model",
    "runs",
    "on",
    "four",
    "GPUs",
    "and",
    "serves",
    "one",
    "port",
    "with",
    "a",
    "small",
    "draft",
    "that",
    "guesses",
    "several",
    "tokens",
    "ahead",
    "while",
    "the",
    "target",
    "verifies",
    "them",
    "in",
    "a",
    "single",
    "forward",
    "pass",
    "so",
    "decode",
    "speed",
    "rises",
    "when",
    "the",
    "guesses",
    "are",
    "right",
    "and",
    "falls",
    "back",
    "when",
    "they",
    "are",
    "wrong",
    "cache",
    "memory",
    "blocks",
    "hold",
    "keys",
    "values",
    "for",
    "every",
    "request",
    "sequence",
    "length",
    "matters",
    "tensor",
    "parallel",
    "shards",
    "weights",
    "across",
    "devices",
    "through",
    "shared",
    "memory",
    "links",
    "latency",
    "throughput",
    "benchmark",
    "warm",
    "cold",
    "start",
    "measure",
    "median",
    "stream",
    "token",
    "per",
    "second",
]


def count_text_tokens(text: str) -> int:
    """Prompt tokens of a string: ceil(len / 4), at least 1 for non-empty text."""
    return -(-len(text) // CHARS_PER_TOKEN)


def count_chat_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Prompt tokens of chat messages, including a small per-message template overhead."""
    total = CHAT_TOKENS_FIXED
    for message in messages:
        total += CHAT_TOKENS_PER_MESSAGE + count_text_tokens(content_text(message.get("content")))
    return total


def content_text(content: object) -> str:
    """Text of an OpenAI message content (string or list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def digest(*parts: object) -> bytes:
    """SHA-256 of the parts, separated unambiguously."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()


def _unit(key: bytes, *parts: object) -> float:
    return int.from_bytes(digest(key.hex(), *parts)[:8], "big") / 2**64


class TokenStream:
    """The i-th generated token of one request, reproducibly.

    ``sample_key`` is None at temperature 0 (greedy); otherwise it varies the text
    (fixed by the request ``seed`` or random). ``flip_rate`` replaces about that
    fraction of tokens with an alternative (used to emulate imperfect agreement of
    speculative decoding with plain decoding).
    """

    def __init__(self, prompt_key: bytes, sample_key: str | None, flip_rate: float) -> None:
        self._key = prompt_key
        self._sample = sample_key
        self._flip = flip_rate

    def natural_length(self) -> int:
        """Tokens until the simulated end-of-sequence (64..511)."""
        return 64 + int(_unit(self._key, "eos") * 448)

    def token(self, index: int) -> str:
        """Text of token ``index`` (words after the first carry a leading space)."""
        choice = int(_unit(self._key, index, self._sample or "") * len(_VOCAB))
        if self._flip > 0 and _unit(self._key, "flip", index) < self._flip:
            choice = (choice + 1 + index) % len(_VOCAB)
        word = _VOCAB[choice]
        return word if index == 0 else " " + word


def sample_key(temperature: float, seed: int | None) -> str | None:
    """None for greedy decoding; otherwise a key fixed by ``seed`` or random."""
    if temperature <= 0:
        return None
    if seed is not None:
        return f"seed:{seed}:{temperature}"
    return f"rand:{random.getrandbits(64)}"
