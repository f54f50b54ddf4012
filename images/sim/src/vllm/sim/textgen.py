"""Deterministic tokenization and text generation over token ids.

A prompt token is about four characters; a chat prompt is its messages in a small template.
Generated tokens are words drawn from a fixed vocabulary, each with an id of its own range.
The generated token at a position is a hash of the context's prompt part (the ids before the
trailing run of generated ids), the position and the sampling seed. So the output is a
function of the token context: a request whose prompt is another's prompt ids plus the ids
it emitted so far continues it token for token (the continuation a gateway makes at a switch).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence

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


# Token id ranges: template markers, prompt pieces, generated words (two ids per word: without
# and with a leading space).
BOS, MSG_START, MSG_SEP, MSG_END, ASSISTANT = 1, 2, 3, 4, 5
ROLE_IDS = {"system": 6, "user": 7, "assistant": 8}
OTHER_ROLE = 9
GARBAGE_ID = 10
KWARGS_BASE = 16
KWARGS_IDS = 64
PROMPT_BASE = 1_000
PROMPT_IDS = 90_000
WORD_BASE = 100_000
GARBAGE_TOKEN = "!"


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


def encode_text(text: str) -> list[int]:
    """Prompt ids of a string: one id per four characters (the count of count_text_tokens)."""
    pieces = (text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))
    return [PROMPT_BASE + int.from_bytes(digest("p", piece)[:4], "big") % PROMPT_IDS for piece in pieces]


def encode_chat(messages: Iterable[Mapping[str, object]], template_kwargs: object = ()) -> list[int]:
    """Prompt ids of chat messages after the template (the count of count_chat_tokens)."""
    ids = [BOS]
    for message in messages:
        role = ROLE_IDS.get(str(message.get("role")), OTHER_ROLE)
        ids += [MSG_START, role, MSG_SEP, *encode_text(content_text(message.get("content"))), MSG_END]
    options = KWARGS_BASE + int.from_bytes(digest("kwargs", template_kwargs)[:4], "big") % KWARGS_IDS
    return [*ids, ASSISTANT, options]


def word_id(choice: int, spaced: bool) -> int:
    """The id of vocabulary word ``choice``, with or without its leading space."""
    return WORD_BASE + 2 * choice + int(spaced)


def decode_id(token_id: int) -> str:
    """Text of a generated id ('' for ids that are not generated words)."""
    if token_id == GARBAGE_ID:
        return GARBAGE_TOKEN
    choice, spaced = divmod(token_id - WORD_BASE, 2)
    if token_id < WORD_BASE or choice >= len(_VOCAB):
        return ""
    return (" " if spaced else "") + _VOCAB[choice]


def split_context(ids: Sequence[int]) -> tuple[bytes, int]:
    """The key of a context's prompt part and how many generated ids follow it."""
    end = len(ids)
    while end > 0 and ids[end - 1] >= WORD_BASE:
        end -= 1
    return digest("ids", ",".join(map(str, ids[:end]))), len(ids) - end


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

    def token(self, index: int) -> int:
        """Id of generated token ``index`` (words after the first carry a leading space)."""
        choice = int(_unit(self._key, index, self._sample or "") * len(_VOCAB))
        if self._flip > 0 and _unit(self._key, "flip", index) < self._flip:
            choice = (choice + 1 + index) % len(_VOCAB)
        return word_id(choice, spaced=index > 0)


def sample_key(temperature: float, seed: int | None) -> str | None:
    """None for greedy decoding; otherwise a key fixed by ``seed`` or random."""
    if temperature <= 0:
        return None
    if seed is not None:
        return f"seed:{seed}:{temperature}"
    return f"rand:{random.getrandbits(64)}"
