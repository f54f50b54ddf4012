"""What the gateway reads from a request body: the model it names and its prompt size.

Only POST requests to `/v1/completions` and `/v1/chat/completions` with a complete JSON body
of at most `MAX_BODY` bytes nested at most `MAX_DEPTH` deep are read. The prompt size is an
estimate (no tokenizer): token ids count as they are, text as one token per `CHARS_PER_TOKEN`
characters, plus `MESSAGE_OVERHEAD` per chat message; enough for bucket edges a factor of 8
apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

INSPECTED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
# Bounds of the inspection: larger or deeper bodies pass through untouched, unread.
MAX_BODY = 128 * 1024  # also what the proxy reads first (`proxy.REPLAY_LIMIT`)
MAX_DEPTH = 64
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


@dataclass(frozen=True)
class Inspected:
    """A parsed request body: the model it names and its estimated prompt tokens."""

    model: str | None
    prompt_tokens: int
    payload: dict[str, Any]


def _text_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _prompt_tokens(prompt: Any, depth: int = 0) -> int:
    """A prompt: text, token ids, or a list of those (deeper nesting counts nothing)."""
    if isinstance(prompt, str):
        return _text_tokens(prompt)
    if isinstance(prompt, list) and depth < 2:
        if all(isinstance(t, int) for t in prompt):
            return len(prompt)
        return sum(_prompt_tokens(p, depth + 1) for p in prompt)
    return 0


def _content_tokens(content: Any) -> int:
    if isinstance(content, str):
        return _text_tokens(content)
    if isinstance(content, list):
        return sum(
            _text_tokens(part["text"])
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return 0


def estimate_tokens(path: str, payload: dict[str, Any]) -> int:
    """The estimated prompt tokens of a completions or chat completions body."""
    if path.endswith("/chat/completions"):
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return 0
        return sum(
            MESSAGE_OVERHEAD + _content_tokens(m.get("content")) for m in messages if isinstance(m, dict)
        )
    return _prompt_tokens(payload.get("prompt"))


def _too_deep(body: bytes) -> bool:
    """True when the body may nest deeper than `MAX_DEPTH` (brackets counted, strings too:
    an over-estimate is safe, the body then passes through unread)."""
    opened = body.count(b"[") + body.count(b"{")
    if opened <= MAX_DEPTH:
        return False
    depth = deepest = 0
    for byte in body.translate(None, _NOT_BRACKETS):
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return True
    return False


def inspect(method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Inspected | None:
    """The model and prompt size of a body the gateway reads, None for anything else."""
    if method != "POST" or path not in INSPECTED_PATHS or not body:
        return None
    kind = next((v for k, v in headers if k == b"content-type"), b"application/json")
    if not kind.split(b";")[0].strip().lower().endswith(b"json"):
        return None
    if len(body) > MAX_BODY or _too_deep(body):
        return None
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict):
        return None
    model = payload.get("model")
    return Inspected(model if isinstance(model, str) else None, estimate_tokens(path, payload), payload)


def with_model(payload: dict[str, Any], model: str) -> bytes:
    """The body again with `model` replaced (the backend knows only the served name)."""
    return json.dumps({**payload, "model": model}, separators=(",", ":")).encode()
