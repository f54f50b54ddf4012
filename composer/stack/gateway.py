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
from composer.stack.values import (
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
    keep_alive_timeout: int = 5  # seconds an idle client connection stays open between requests
    max_connections: int = 1024  # open client connections (past it the oldest idle one closes)
    stall_timeout: int = 120  # seconds a stream may get no bytes from the backend (0: off)
    unresponsive_timeout: int = (
        30  # seconds a waiting request lets the backend's /health go unanswered (0: off)
    )
    hold_keepalive: int = 15  # seconds between SSE comments to a held stream: true request (0: off)
    live: tuple[str, ...] = ()  # variants that serve at once (a live set); empty: one at a time
    spill: int = 0  # live routing: outstanding requests past another variant's that spill to it (0: off)
    prometheus_image: str = PROMETHEUS_IMAGE  # the observability profile's Prometheus
    prometheus_port: int = 9090  # its web port on the host (bound like the stack's port)

    @property
    def switches(self) -> bool:
        """True when the gateway raises switch demands (aliases or the automatic policy)."""
        return self.switch_on_model or self.policy == "auto"


def parse_count(raw: object) -> int:
    """A whole number, zero or more."""
    if raw in (0, "0") or (isinstance(raw, str) and raw.strip() == "0"):
        return 0
    try:
        return parse_positive_int(raw)
    except ValueError:
        raise ValueError("a whole number, zero or more") from None


POLICIES = ("manual", "auto")


def parse_policy(raw: object) -> str:
    """manual or auto."""
    text = str(raw).strip()
    if text not in POLICIES:
        raise ValueError("one of " + ", ".join(POLICIES))
    return text


def parse_window(raw: object) -> int:
    """A duration of at least one second."""
    seconds = parse_duration(raw)
    if seconds < 1:
        raise ValueError("a duration of at least 1s, such as 30 or 2m")
    return seconds


MAX_HEAD_BYTES = (1024, 16 * 1024 * 1024)  # the gateway's own bounds (GATEWAY_MAX_HEAD_BYTES)
MAX_CONNECTIONS = 1_000_000
MAX_CLIENT_TIMEOUT = 3600


def parse_head_bytes(raw: object) -> int:
    """A size from 1KiB to 16MiB, such as 65536 or 64KiB."""
    allowed = "a size from 1KiB to 16MiB, such as 65536 or 64KiB"
    try:
        size = parse_size(raw)
    except ValueError:
        raise ValueError(allowed) from None
    if not MAX_HEAD_BYTES[0] <= size <= MAX_HEAD_BYTES[1]:
        raise ValueError(allowed)
    return size


def parse_client_timeout(raw: object) -> int:
    """A duration from 1s to 1h."""
    allowed = "a duration from 1s to 1h, such as 10 or 10s"
    try:
        seconds = parse_duration(raw)
    except ValueError:
        raise ValueError(allowed) from None
    if not 1 <= seconds <= MAX_CLIENT_TIMEOUT:
        raise ValueError(allowed)
    return seconds


MAX_STREAM_TIMEOUT = 86400


def parse_stream_timeout(raw: object) -> int:
    """0 (off) or a duration up to 1 day."""
    allowed = "0 (off) or a duration up to 1d, such as 120 or 2m"
    try:
        seconds = parse_duration(raw)
    except ValueError:
        raise ValueError(allowed) from None
    if seconds > MAX_STREAM_TIMEOUT:
        raise ValueError(allowed)
    return seconds


def parse_keepalive(raw: object) -> int:
    """0 (off) or a duration from 1s to 1h."""
    allowed = "0 (off) or a duration from 1s to 1h, such as 15 or 15s"
    try:
        seconds = parse_duration(raw)
    except ValueError:
        raise ValueError(allowed) from None
    if seconds > MAX_CLIENT_TIMEOUT:
        raise ValueError(allowed)
    return seconds


def parse_max_connections(raw: object) -> int:
    """A positive whole number up to 1000000."""
    return parse_positive_int(raw, MAX_CONNECTIONS)


def parse_live(raw: object) -> tuple[str, ...]:
    """Variant names: a list, or a comma-separated string (from the environment)."""
    if raw is None or raw == "" or raw == ():
        return ()
    items = list(raw) if isinstance(raw, list | tuple) else str(raw).split(",")
    names = [str(i).strip() for i in items if isinstance(i, str) and i.strip()]
    if (len(names) != len(items) and not isinstance(raw, str)) or len(set(names)) != len(names):
        raise ValueError('a list of distinct variant names, such as ["baseline", "mtp"]')
    return tuple(names)


GATEWAY_SETTINGS: tuple[tuple[str, str | None, Callable[[object], object], object], ...] = (
    # key, environment variable, parser, default
    ("enabled", "GATEWAY_ENABLED", parse_bool, GatewaySettings.enabled),
    ("image", "GATEWAY_IMAGE", parse_text, GatewaySettings.image),
    ("hold_timeout", "GATEWAY_HOLD_TIMEOUT", parse_duration, GatewaySettings.hold_timeout),
    ("max_held", "GATEWAY_MAX_HELD", parse_positive_int, GatewaySettings.max_held),
    ("drain_timeout", "GATEWAY_DRAIN_TIMEOUT", parse_duration, GatewaySettings.drain_timeout),
    ("warmup_requests", "GATEWAY_WARMUP_REQUESTS", parse_count, GatewaySettings.warmup_requests),
    ("switch_on_model", "GATEWAY_SWITCH_ON_MODEL", parse_bool, GatewaySettings.switch_on_model),
    ("policy", "GATEWAY_POLICY", parse_policy, GatewaySettings.policy),
    ("min_residency", "GATEWAY_MIN_RESIDENCY", parse_duration, GatewaySettings.min_residency),
    ("residency_wait", "GATEWAY_RESIDENCY_WAIT", parse_duration, GatewaySettings.residency_wait),
    ("policy_window", "GATEWAY_POLICY_WINDOW", parse_window, GatewaySettings.policy_window),
    ("max_head_bytes", "GATEWAY_MAX_HEAD_BYTES", parse_head_bytes, GatewaySettings.max_head_bytes),
    ("head_timeout", "GATEWAY_HEAD_TIMEOUT", parse_client_timeout, GatewaySettings.head_timeout),
    ("body_timeout", "GATEWAY_BODY_TIMEOUT", parse_client_timeout, GatewaySettings.body_timeout),
    (
        "keep_alive_timeout",
        "GATEWAY_KEEP_ALIVE_TIMEOUT",
        parse_client_timeout,
        GatewaySettings.keep_alive_timeout,
    ),
    ("max_connections", "GATEWAY_MAX_CONNECTIONS", parse_max_connections, GatewaySettings.max_connections),
    ("stall_timeout", "GATEWAY_STALL_TIMEOUT", parse_stream_timeout, GatewaySettings.stall_timeout),
    (
        "unresponsive_timeout",
        "GATEWAY_UNRESPONSIVE_TIMEOUT",
        parse_keepalive,
        GatewaySettings.unresponsive_timeout,
    ),
    ("hold_keepalive", "GATEWAY_HOLD_KEEPALIVE", parse_keepalive, GatewaySettings.hold_keepalive),
    ("live", "GATEWAY_LIVE", parse_live, GatewaySettings.live),
    ("spill", "GATEWAY_SPILL", parse_count, GatewaySettings.spill),
    ("prometheus_image", "PROMETHEUS_IMAGE", parse_text, GatewaySettings.prometheus_image),
    ("prometheus_port", "PROMETHEUS_PORT", parse_port, GatewaySettings.prometheus_port),
)
