"""Read vLLM's boot progress and KV cache size from its log."""

from __future__ import annotations

import re

# Latest first: the first marker found in the log names the stage.
STAGES: tuple[tuple[str, str], ...] = (
    ("Application startup complete", "server ready"),
    ("Starting vLLM server on http://", "starting server"),
    ("init engine (profile, create kv cache, warmup model) took", "engine initialised"),
    ("KV cache size:", "KV cache allocated"),  # printed before the `init engine` line
    ("Model loading took", "model loaded"),
    ("Loading weights took", "weights loaded"),
)
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")


def boot_stage(log: str) -> str:
    """The latest boot stage the log shows, or `loading` before any."""
    for marker, stage in STAGES:
        if marker in log:
            return stage
    return "loading"


def kv_cache_tokens(log: str) -> int | None:
    """The last `KV cache size: N tokens` in the log, or None."""
    found = _KV_TOKENS.findall(log)
    return int(found[-1].replace(",", "")) if found else None


def tail(log: str, lines: int = 30) -> str:
    """The last lines of a log."""
    return "\n".join(log.rstrip().splitlines()[-lines:])


def redact(log: str, secret: str | None) -> str:
    """The log with every occurrence of a secret (the API key) masked."""
    return log.replace(secret, "********") if secret else log
