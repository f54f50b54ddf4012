"""The `[gateway]` table of a stack: the proxy that owns the shared port (`enabled = false`:
the variant publishes it). Every key the gateway reads itself is checked against the
gateway's own bounds (`composer.gateway.config.LIMITS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from composer import __version__
from composer.gateway.config import LIMITS
from composer.stack.values import (
    choice,
    format_seconds,
    parse_bool,
    parse_duration,
    parse_port,
    parse_positive_int,
    parse_size,
    parse_text,
)

DEFAULT_IMAGE = f"vllm-composer-gateway:{__version__}"
PROMETHEUS_IMAGE = f"vllm-composer-prometheus:{__version__}"


@dataclass(frozen=True)
class GatewaySettings:
    """Gateway settings; the defaults render the committed compose files."""

    enabled: bool = True
    image: str = DEFAULT_IMAGE
    hold_timeout: int = 300  # seconds a client request may be held (then 503 + Retry-After)
    max_held: int = 256  # requests held at once (more get 429 + Retry-After)
    drain_timeout: int = 60  # seconds a swap waits for in-flight requests before cutting them
    warmup_requests: int = 1  # requests sent to a new variant after its gate, before clients
    switch_on_model: bool = False  # a request naming a variant's alias switches to it
    policy: str = "manual"  # "auto": switch to the variant [workloads] names for the traffic
    min_residency: int = 60  # seconds a variant serves after a switch before another one
    residency_wait: int = 30  # seconds a request for another variant may wait (then 503)
    policy_window: int = 30  # seconds of traffic the automatic policy looks at
    max_head_bytes: int = 65536  # bytes a request head may have (more: 431)
    head_timeout: int = 10  # seconds a client has to send a request head (then 408 and close)
    body_timeout: int = 60  # seconds a request body may pause between two chunks (then 408 and close)
    # seconds an idle client connection stays open between requests: longer than clients keep
    # theirs (httpx 5 s, aiohttp 15 s), so none sends on a connection the gateway is closing
    keep_alive_timeout: int = 75
    max_connections: int = 1024  # open client connections (past it the oldest idle one closes)
    stall_timeout: int = 120  # seconds a stream may get no bytes from the backend (0: off)
    continue_streams: bool = True  # a stream whose backend breaks goes on on another, token for token
    unresponsive_timeout: int = 30  # seconds a waiting request lets /health go unanswered (0: off)
    hold_keepalive: int = 15  # seconds between SSE comments to a held stream: true request (0: off)
    live: tuple[str, ...] = ()  # variants that serve at once (a live set); empty: one at a time
    spill: int = 0  # live routing: outstanding requests past another variant's that spill to it (0: off)
    prometheus_image: str = PROMETHEUS_IMAGE  # the observability profile's Prometheus
    prometheus_port: int = 9090  # its web port on the host (bound like the stack's port)

    @property
    def switches(self) -> bool:
        """True when the gateway raises switch demands (aliases or the automatic policy)."""
        return self.switch_on_model or self.policy == "auto"

    def continues(self, drain: bool) -> bool:
        """Whether a switch continues eligible streams: unless `continue_streams` is off or `up --drain`."""
        return self.continue_streams and not drain


def parse_count(raw: object) -> int:
    """A whole number, zero or more."""
    if raw in (0, "0") or (isinstance(raw, str) and raw.strip() == "0"):
        return 0
    try:
        return parse_positive_int(raw)
    except ValueError:
        raise ValueError("a whole number, zero or more") from None


POLICIES = ("manual", "auto")


def _shown(value: int, kind: str) -> str:
    """A bound as the stack writes it: `24h`, `90s`, `16MiB`, `1000`."""
    if kind == "duration":
        return format_seconds(value)
    if kind == "size":
        for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= factor and value % factor == 0:
                return f"{value // factor}{unit}"
    return str(value)


Row = tuple[str, str | None, Callable[[object], object], object]


def _gateway_row(key: str, parse: Callable[[object], int], kind: str, example: str, lowest: int = 0) -> Row:
    """A key the gateway reads from `GATEWAY_<KEY>`: `parse`, then the gateway's own bounds
    (`LIMITS`; `lowest` is the parser's floor), so the stack refuses what the gateway would."""
    variable = f"GATEWAY_{key.upper()}"
    low, high = LIMITS[variable]
    low, high = max(math.ceil(low), lowest), math.floor(high)
    noun = {"duration": "a duration", "size": "a size", "count": "a whole number"}[kind]
    allowed = f"{noun} from {_shown(low, kind)} to {_shown(high, kind)}, such as {example}"
    if kind == "duration" and low == 0:
        allowed = f"0 or a duration up to {_shown(high, kind)}, such as {example}"

    def parse_within(raw: object) -> int:
        try:
            value = parse(raw)
        except ValueError:
            raise ValueError(allowed) from None
        if not low <= value <= high:
            raise ValueError(allowed)
        return value

    return (key, variable, parse_within, getattr(GatewaySettings, key))


def parse_live(raw: object) -> tuple[str, ...]:
    """Variant names: a list, or a comma-separated string (from the environment)."""
    if raw is None or raw == "" or raw == ():
        return ()
    items = list(raw) if isinstance(raw, list | tuple) else str(raw).split(",")
    names = [str(i).strip() for i in items if isinstance(i, str) and i.strip()]
    if (len(names) != len(items) and not isinstance(raw, str)) or len(set(names)) != len(names):
        raise ValueError('a list of distinct variant names, such as ["baseline", "mtp"]')
    return tuple(names)


GATEWAY_SETTINGS: tuple[Row, ...] = (
    # key, environment variable, parser, default
    ("enabled", "GATEWAY_ENABLED", parse_bool, GatewaySettings.enabled),
    ("image", "GATEWAY_IMAGE", parse_text, GatewaySettings.image),
    _gateway_row("hold_timeout", parse_duration, "duration", "300 or 5m", lowest=1),
    _gateway_row("max_held", parse_positive_int, "count", "256", lowest=1),
    _gateway_row("drain_timeout", parse_duration, "duration", "60 or 1m"),
    ("warmup_requests", "GATEWAY_WARMUP_REQUESTS", parse_count, GatewaySettings.warmup_requests),
    ("switch_on_model", "GATEWAY_SWITCH_ON_MODEL", parse_bool, GatewaySettings.switch_on_model),
    ("policy", "GATEWAY_POLICY", choice(POLICIES), GatewaySettings.policy),
    _gateway_row("min_residency", parse_duration, "duration", "60 or 1m"),
    _gateway_row("residency_wait", parse_duration, "duration", "30 or 30s"),
    _gateway_row("policy_window", parse_duration, "duration", "30 or 2m", lowest=1),
    _gateway_row("max_head_bytes", parse_size, "size", "65536 or 64KiB"),
    _gateway_row("head_timeout", parse_duration, "duration", "10 or 10s", lowest=1),
    _gateway_row("body_timeout", parse_duration, "duration", "60 or 1m", lowest=1),
    _gateway_row("keep_alive_timeout", parse_duration, "duration", "75 or 75s", lowest=1),
    _gateway_row("max_connections", parse_positive_int, "count", "1024", lowest=1),
    _gateway_row("stall_timeout", parse_duration, "duration", "120 or 2m"),
    ("continue_streams", "GATEWAY_CONTINUE_STREAMS", parse_bool, GatewaySettings.continue_streams),
    _gateway_row("unresponsive_timeout", parse_duration, "duration", "30 or 30s"),
    _gateway_row("hold_keepalive", parse_duration, "duration", "15 or 15s"),
    ("live", "GATEWAY_LIVE", parse_live, GatewaySettings.live),
    _gateway_row("spill", parse_count, "count", "4"),
    ("prometheus_image", "PROMETHEUS_IMAGE", parse_text, GatewaySettings.prometheus_image),
    ("prometheus_port", "PROMETHEUS_PORT", parse_port, GatewaySettings.prometheus_port),
)
"""Every `[gateway]` key; each one the gateway reads itself is checked against its bounds."""
HOLD_TIMEOUT_MAX = int(LIMITS["GATEWAY_HOLD_TIMEOUT"][1])
