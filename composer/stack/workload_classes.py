"""Workload classes: the prompt-length bucket and the streams a `[workloads]` key names.

`<bucket>[<tokens>]-<streams>`: `chat-1`, `medium-4`, `long-16`, `long16000-16`,
`chatas-given-1`; `chat` is a prompt of at most `CHAT_MAX_TOKENS` tokens, `medium` at most
`MEDIUM_MAX_TOKENS`, `long` longer. The stack refuses another form (`check_workload_name`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

CHAT_MAX_TOKENS = 512
MEDIUM_MAX_TOKENS = 4096
BUCKETS: dict[str, tuple[int, int | None]] = {
    "chat": (0, CHAT_MAX_TOKENS),
    "medium": (CHAT_MAX_TOKENS + 1, MEDIUM_MAX_TOKENS),
    "long": (MEDIUM_MAX_TOKENS + 1, None),
}
_NAME = re.compile(r"(?P<bucket>chat|medium|long)(?P<tokens>as-given|[0-9]{1,7})?-(?P<streams>[0-9]{1,5})")
WORKLOAD_PATTERN = (
    "^(chat|medium|long)(as-given|[0-9]{1,7})?-(?!0+$)[0-9]{1,5}$"  # the same, for the JSON Schema
)


@dataclass(frozen=True)
class ClassShape:
    """What a class name says: the bucket's token range, a measured length, the streams."""

    name: str
    min_tokens: int
    max_tokens: int | None
    tokens: int | None
    streams: int


def class_shape(name: str) -> ClassShape | None:
    """The shape a workload key names, or None for a key of another form."""
    match = _NAME.fullmatch(name)
    if match is None or int(match["streams"]) < 1:
        return None
    low, high = BUCKETS[match["bucket"]]
    raw = match["tokens"]
    tokens = int(raw) if raw and raw != "as-given" else None
    return ClassShape(name, low, high, tokens, int(match["streams"]))


ACCEPTED = (
    "a workload class BUCKET[TOKENS]-STREAMS, BUCKET one of chat (prompts up to "
    f"{CHAT_MAX_TOKENS} tokens), medium (up to {MEDIUM_MAX_TOKENS}) or long, e.g. chat-1, medium-4, "
    "long-16, long16000-16"
)


def check_workload_name(name: str) -> str | None:
    """Why `name` is not a workload class (None when it is one)."""
    if class_shape(name) is not None:
        return None
    return f"{name!r} is not {ACCEPTED}"


def gateway_workloads(workloads: Mapping[str, str]) -> str:
    """The `GATEWAY_WORKLOADS` value of a `[workloads]` table (keys that are no class left out)."""
    shapes = [(shape, variant) for key, variant in workloads.items() if (shape := class_shape(key))]
    return ",".join(
        f"{s.name}:{s.min_tokens}:{s.max_tokens or 0}:{s.tokens or 0}:{s.streams}={variant}"
        for s, variant in shapes
    )


def live_routing(workloads: Mapping[str, str], variants: Iterable[str]) -> tuple[bool, str]:
    """How a live set of `variants` routes: (by class?, one line saying so)."""
    members = set(variants)
    named = [
        f"{key} -> {variant}" for key, variant in workloads.items() if variant in members and class_shape(key)
    ]
    if named:
        return True, "by workload class: " + ", ".join(named)
    return False, (
        "by load alone: no [workloads] class names a variant of the live set "
        '(e.g. chat-1 = "mtp", long-16 = "baseline"; `compose-spec recommend --write` measures them)'
    )
