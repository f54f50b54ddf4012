"""The `[gateway]` table of a stack: the proxy that owns the shared port.

With the gateway on (the default), clients talk to it on the shared port; it forwards to
the serving variant on the project's private network, holds requests while no variant
is ready or while a swap drains and gates, and the variants publish no port themselves.
`enabled = false` keeps the direct mode: the variant publishes the port.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from composer import __version__
from composer.stack.values import parse_bool, parse_duration, parse_positive_int, parse_text

DEFAULT_IMAGE = f"vllm-composer-gateway:{__version__}"


@dataclass(frozen=True)
class GatewaySettings:
    """Gateway settings; the defaults render the committed compose files."""

    enabled: bool = True
    image: str = DEFAULT_IMAGE
    hold_timeout: int = 300  # seconds a client request may be held (then 503 + Retry-After)
    max_held: int = 256  # requests held at once (more get 429 + Retry-After)
    drain_timeout: int = 60  # seconds a swap waits for in-flight requests before cutting them
    warmup_requests: int = 1  # requests sent to a new variant after its gate, before clients


def parse_count(raw: object) -> int:
    """A whole number, zero or more."""
    if raw in (0, "0") or (isinstance(raw, str) and raw.strip() == "0"):
        return 0
    try:
        return parse_positive_int(raw)
    except ValueError:
        raise ValueError("a whole number, zero or more") from None


GATEWAY_SETTINGS: tuple[tuple[str, str | None, Callable[[object], object], object], ...] = (
    # key, environment variable, parser, default
    ("enabled", "GATEWAY_ENABLED", parse_bool, GatewaySettings.enabled),
    ("image", "GATEWAY_IMAGE", parse_text, GatewaySettings.image),
    ("hold_timeout", "GATEWAY_HOLD_TIMEOUT", parse_duration, GatewaySettings.hold_timeout),
    ("max_held", "GATEWAY_MAX_HELD", parse_positive_int, GatewaySettings.max_held),
    ("drain_timeout", "GATEWAY_DRAIN_TIMEOUT", parse_duration, GatewaySettings.drain_timeout),
    ("warmup_requests", "GATEWAY_WARMUP_REQUESTS", parse_count, GatewaySettings.warmup_requests),
)
GATEWAY_KEYS = {key for key, *_ in GATEWAY_SETTINGS}
