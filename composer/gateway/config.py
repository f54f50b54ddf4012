"""Gateway settings from the environment, validated once at start.

Every knob is an environment variable (the compose file sets them); a bad value raises
`GatewayConfigError` with a one-line message naming the variable and the allowed values.
The API key is read from `VLLM_API_KEY` and never appears in `repr()` or `describe()`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from composer.errors import GatewayConfigError
from composer.gateway.routing.policy import WorkloadClass, parse_workloads

DEFAULT_UPSTREAM = "http://vllm:8000"
DEFAULT_CONTROL_SOCKET = "/run/gateway/control.sock"
CANDIDATES = "GATEWAY_UPSTREAM_CANDIDATES"
MAX_LIVE = 64  # upstreams in a live set (they are metric labels: bounded)
LIVE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}(/[A-Za-z0-9._-]{1,16})?")
VARIANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_CHARS = "letters, digits, '.', '_', '-' (at most 64)"

# name -> (meaning, default) for documentation and for renderers that set them.
ENV_VARS: dict[str, tuple[str, str]] = {
    "GATEWAY_UPSTREAM": (
        "backend base URL (the variant's service name on the private network)",
        DEFAULT_UPSTREAM,
    ),
    "GATEWAY_UPSTREAM_CANDIDATES": (
        "URL,... of sleep-mode backends: readiness asks their /is_sleeping, and a gateway that "
        "starts (a restart, a reboot) forwards to the one that answers healthy and awake",
        "",
    ),
    "GATEWAY_LIVE_UPSTREAMS": (
        'JSON list of live upstreams [{"name": "mtp/1", "variant": "mtp", "url": "http://vllm-mtp-1:8000"}]: '
        "each request goes to one of them by alias, class and load (empty: GATEWAY_UPSTREAM alone)",
        "",
    ),
    "GATEWAY_HOST": ("address the public port binds inside the container", "0.0.0.0"),
    "GATEWAY_PORT": ("public port inside the container", "8000"),
    "GATEWAY_SERVED_NAME": ("served model name the backend must list in /v1/models to count as ready", ""),
    "GATEWAY_HOLD_TIMEOUT": ("seconds a request may be held before 503 + Retry-After", "300"),
    "GATEWAY_MAX_HELD": ("requests that may wait at once; more get 429 + Retry-After", "256"),
    "GATEWAY_DRAIN_TIMEOUT": ("default seconds a drain waits for in-flight requests", "60"),
    "GATEWAY_STALL_TIMEOUT": (
        "seconds an SSE stream may get no bytes from the backend; then an error event, [DONE] and the "
        "backend counts as not ready (0: off)",
        "120",
    ),
    "GATEWAY_CONTINUE_STREAMS": (
        "true: a streamed completion whose backend breaks mid-way continues on another ready upstream "
        "(or the same one once ready again, within hold_timeout), token for token, as the same response",
        "true",
    ),
    "GATEWAY_UNRESPONSIVE_TIMEOUT": (
        "seconds a request waiting for the backend's answer lets the backend's /health go unanswered "
        "(probed every few seconds while it waits); then 504 and the backend counts as not ready (0: off)",
        "30",
    ),
    "GATEWAY_HOLD_KEEPALIVE": (
        "seconds between SSE comment lines to a held stream: true request, headers first (0: off)",
        "15",
    ),
    "GATEWAY_POLL_INTERVAL": ("seconds between backend readiness polls", "0.1"),
    "GATEWAY_HOLD_LEASE": ("default lease of a control hold in seconds (expires unless renewed)", "60"),
    "GATEWAY_RETRY_AFTER": ("Retry-After seconds sent with 503 and 429", "2"),
    "GATEWAY_MAX_HEAD_BYTES": ("bytes a request head (request line, headers) may have; more: 431", "65536"),
    "GATEWAY_HEAD_TIMEOUT": ("seconds a client has to send a request head; then 408 and close", "10"),
    "GATEWAY_BODY_TIMEOUT": (
        "seconds a request body may pause between two chunks; then 408 and close "
        "(nginx's client_body_timeout)",
        "60",
    ),
    "GATEWAY_KEEP_ALIVE_TIMEOUT": ("seconds an idle client connection stays open between requests", "75"),
    "GATEWAY_MAX_CONNECTIONS": (
        "open client connections; past it the oldest idle one is closed (none idle: 503)",
        "1024",
    ),
    "GATEWAY_CONTROL_SOCKET": ("UNIX socket of the control channel (mode 0600)", DEFAULT_CONTROL_SOCKET),
    "GATEWAY_STATE_DIR": (
        "folder the gateway keeps its switch history in across restarts (empty: memory only)",
        "",
    ),
    "GATEWAY_LOG_LEVEL": ("log level: debug, info, warning, error", "info"),
    "GATEWAY_SWITCH_ON_MODEL": ("true: a request naming a variant's alias switches to that variant", "false"),
    "GATEWAY_ALIASES": ("ALIAS=VARIANT,... model names that name a variant (switch_on_model)", ""),
    "GATEWAY_POLICY": ("manual, or auto: switch to the variant [workloads] names for the traffic", "manual"),
    "GATEWAY_MIN_RESIDENCY": ("seconds a variant serves after a switch before another switch", "60"),
    "GATEWAY_RESIDENCY_WAIT": (
        "seconds a request for another variant may wait out a residency (then 503)",
        "30",
    ),
    "GATEWAY_POLICY_WINDOW": ("seconds of traffic the auto policy looks at", "30"),
    "GATEWAY_WORKLOADS": (
        "NAME:MIN:MAX:TOKENS:STREAMS[:CROSSOVER]=VARIANT,... workload classes (policy = auto, live routing)",
        "",
    ),
    "GATEWAY_SPILL": (
        "live routing: send a request to another variant's upstream when it has this many fewer "
        "outstanding requests than the chosen one (0: off)",
        "0",
    ),
    "VLLM_API_KEY": ("API key checked on every forwarded route but health/version/metrics/ping/load", ""),
}

MAX_LEASE_S = 3600.0

# name -> (lowest, highest) value: the one place of these bounds (composer.stack.gateway uses them).
LIMITS: dict[str, tuple[float, float]] = {
    "GATEWAY_PORT": (1, 65535),
    "GATEWAY_HOLD_TIMEOUT": (0.1, 86400.0),
    "GATEWAY_MAX_HELD": (0, 100000),
    "GATEWAY_DRAIN_TIMEOUT": (0.0, 86400.0),
    "GATEWAY_POLL_INTERVAL": (0.01, 1.0),
    "GATEWAY_STALL_TIMEOUT": (0.0, 86400.0),
    "GATEWAY_UNRESPONSIVE_TIMEOUT": (0.0, 3600.0),
    "GATEWAY_HOLD_KEEPALIVE": (0.0, 3600.0),
    "GATEWAY_HOLD_LEASE": (1.0, MAX_LEASE_S),
    "GATEWAY_RETRY_AFTER": (1, 3600),
    "GATEWAY_MAX_HEAD_BYTES": (1024, 16 * 1024 * 1024),
    "GATEWAY_HEAD_TIMEOUT": (0.1, 3600.0),
    "GATEWAY_BODY_TIMEOUT": (0.1, 3600.0),
    "GATEWAY_KEEP_ALIVE_TIMEOUT": (0.1, 3600.0),
    "GATEWAY_MAX_CONNECTIONS": (1, 1_000_000),
    "GATEWAY_MIN_RESIDENCY": (0.0, 86400.0),
    "GATEWAY_RESIDENCY_WAIT": (0.0, 86400.0),
    "GATEWAY_POLICY_WINDOW": (1.0, 86400.0),
    "GATEWAY_SPILL": (0, 100000),
}

# Settings read once at start (a change needs a new container); a running gateway takes every
# other one in place (`LIVE`, `PUT /settings`).
FIXED = {
    "GATEWAY_UPSTREAM",
    "GATEWAY_LIVE_UPSTREAMS",
    "GATEWAY_HOST",
    "GATEWAY_PORT",
    "GATEWAY_SERVED_NAME",
    "GATEWAY_POLL_INTERVAL",
    "GATEWAY_CONTROL_SOCKET",
    "GATEWAY_STATE_DIR",
    "VLLM_API_KEY",
}
LIVE: tuple[str, ...] = tuple(name for name in ENV_VARS if name not in FIXED)

LOG_LEVELS = ("debug", "info", "warning", "error")
POLICIES = ("manual", "auto")


@dataclass(frozen=True)
class LiveSpec:
    """One upstream of a live set: its name (`variant/replica`), its variant and base URL."""

    name: str
    variant: str
    url: str

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "variant": self.variant, "url": self.url}


def parse_live(items: object, where: str = "GATEWAY_LIVE_UPSTREAMS") -> tuple[LiveSpec, ...]:
    """A live set from decoded JSON (`[{name, variant, url}]`, names unique); ValueError otherwise."""
    if not isinstance(items, list) or len(items) > MAX_LIVE:
        raise ValueError(f"{where} must be a JSON list of at most {MAX_LIVE} {{name, variant, url}} objects")
    specs: dict[str, LiveSpec] = {}
    for item in items:
        if not isinstance(item, dict) or set(item) - {"name", "variant", "url"}:
            raise ValueError(f"{where}: item {item!r} is invalid; allowed: an object with name, variant, url")
        variant = item.get("variant")
        if not isinstance(variant, str) or not VARIANT.fullmatch(variant):
            raise ValueError(f"{where}: variant {variant!r} is invalid; allowed: {NAME_CHARS}")
        name = item.get("name") or f"{variant}/1"
        if not isinstance(name, str) or not LIVE_NAME.fullmatch(name):
            raise ValueError(f"{where}: name {name!r} is invalid; allowed: VARIANT/REPLICA, e.g. mtp/1")
        if name in specs:
            raise ValueError(f"{where}: name {name!r} is given twice")
        try:
            url = check_upstream(str(item.get("url", "")), f"{where} url of {name}")
        except GatewayConfigError as err:
            raise ValueError(str(err)) from err
        specs[name] = LiveSpec(name, variant, url)
    return tuple(specs.values())


@dataclass(frozen=True)
class GatewayConfig:
    """Validated gateway settings (see `ENV_VARS` for each one's meaning)."""

    upstream: str = DEFAULT_UPSTREAM
    upstream_candidates: tuple[str, ...] = ()
    host: str = "0.0.0.0"
    port: int = 8000
    served_name: str = ""
    hold_timeout: float = 300.0
    max_held: int = 256
    drain_timeout: float = 60.0
    poll_interval: float = 0.1
    stall_timeout: float = 120.0
    continue_streams: bool = True
    unresponsive_timeout: float = 30.0
    hold_keepalive: float = 15.0
    hold_lease: float = 60.0
    retry_after: int = 2
    max_head_bytes: int = 65536
    head_timeout: float = 10.0
    body_timeout: float = 60.0
    keep_alive_timeout: float = 75.0
    max_connections: int = 1024
    control_socket: str = DEFAULT_CONTROL_SOCKET
    log_level: str = "info"
    state_dir: str = ""
    api_key: str = field(default="", repr=False)
    switch_on_model: bool = False
    aliases: tuple[tuple[str, str], ...] = ()
    policy: str = "manual"
    min_residency: float = 60.0
    residency_wait: float = 30.0
    policy_window: float = 30.0
    workloads: tuple[WorkloadClass, ...] = ()
    live_upstreams: tuple[LiveSpec, ...] = ()
    spill: int = 0
    settings: tuple[tuple[str, str], ...] = ()  # the `LIVE` variables as given (non-empty ones)

    @property
    def inspects_bodies(self) -> bool:
        """True when request bodies are read for their model name and prompt size."""
        return self.switch_on_model or self.policy == "auto" or bool(self.live_upstreams)

    def describe(self) -> dict[str, object]:
        """The settings as a JSON-ready dict, with the API key reduced to whether it is set."""
        out: dict[str, object] = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "api_key"}
        out["api_key_set"] = bool(self.api_key)
        out["aliases"] = dict(self.aliases)
        out["workloads"] = [w.name for w in self.workloads]
        out["live_upstreams"] = [spec.describe() for spec in self.live_upstreams]
        out["settings"] = dict(self.settings)
        return out

    def live_values(self) -> dict[str, object]:
        """The value of each `LIVE` setting (compare two of these to see whether they differ)."""
        return {name: getattr(self, field_name(name)) for name in LIVE}

    def with_settings(self, changes: Mapping[str, str]) -> GatewayConfig:
        """These settings with `changes` (`LIVE` variables; "" is the default) applied, validated
        by `load_config` as a whole: raises GatewayConfigError naming the first bad one."""
        fixed = sorted(set(changes) - set(LIVE))
        if fixed:
            raise GatewayConfigError(
                f"{fixed[0]} cannot change in a running gateway (it needs a new container); "
                f"allowed: {', '.join(LIVE)}"
            )
        if not all(isinstance(value, str) for value in changes.values()):
            raise GatewayConfigError("every setting's value must be a string, as in the environment")
        env = {**dict(self.settings), **changes, "GATEWAY_SERVED_NAME": self.served_name}
        parsed = load_config(env)
        changed = {field_name(name): getattr(parsed, field_name(name)) for name in changes}
        return replace(self, **changed, settings=parsed.settings)


def field_name(variable: str) -> str:
    """`GATEWAY_MAX_HELD` -> `max_held`: the `GatewayConfig` field a variable sets."""
    return variable.removeprefix("GATEWAY_").lower()


def check_upstream(value: str, name: str = "GATEWAY_UPSTREAM") -> str:
    """An http(s) base URL with a host and no path, query or credentials; returns it without '/'."""
    parts = urlsplit(value.strip())
    ok = (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.path in ("", "/")
        and not parts.query
        and not parts.fragment
        and parts.username is None
    )
    if ok:
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            ok = False
    if not ok:
        raise GatewayConfigError(
            f"{name}={value!r} is not a backend base URL; "
            f"allowed: http(s)://HOST[:PORT], e.g. {DEFAULT_UPSTREAM}"
        )
    return value.strip().rstrip("/")


def _limited(env: Mapping[str, str], name: str) -> float:
    """The number `name` sets within its `LIMITS` (an integer where its default is one)."""
    default = GatewayConfig.__dataclass_fields__[field_name(name)].default
    assert isinstance(default, int | float), name  # every LIMITS setting is a number
    low, high = LIMITS[name]
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if isinstance(default, int) else float(raw)
    except ValueError:
        value = math.nan
    if not (low <= value <= high):
        kind = f"an integer from {low:.0f} to {high:.0f}" if isinstance(default, int) else None
        raise _invalid(name, raw, kind or f"a number of seconds from {low:g} to {high:g}")
    return value


def _invalid(name: str, raw: str, allowed: str) -> GatewayConfigError:
    return GatewayConfigError(f"{name}={raw!r} is invalid; allowed: {allowed}")


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = env.get(name, "").strip().lower() or default
    if value not in choices:
        raise _invalid(name, value, ", ".join(choices))
    return value


def load_config(env: Mapping[str, str]) -> GatewayConfig:
    """Read and validate every `GATEWAY_*` variable (and `VLLM_API_KEY`) from `env`."""
    socket_path = env.get("GATEWAY_CONTROL_SOCKET", "").strip() or DEFAULT_CONTROL_SOCKET
    if not socket_path.startswith("/") or len(socket_path.encode()) > 100:
        raise _invalid("GATEWAY_CONTROL_SOCKET", socket_path, "an absolute path of at most 100 bytes")
    state_dir = env.get("GATEWAY_STATE_DIR", "").strip()
    if state_dir and not state_dir.startswith("/"):
        raise _invalid("GATEWAY_STATE_DIR", state_dir, "an absolute path, or empty (memory only)")
    policy = _choice(env, "GATEWAY_POLICY", POLICIES, "manual")
    try:
        workloads = parse_workloads(env.get("GATEWAY_WORKLOADS", ""))
    except ValueError as err:
        raise GatewayConfigError(f"GATEWAY_WORKLOADS is invalid: {err}") from err
    if policy == "auto" and not workloads:
        raise GatewayConfigError("GATEWAY_POLICY=auto needs GATEWAY_WORKLOADS (workload classes)")
    served = env.get("GATEWAY_SERVED_NAME", "").strip()
    live_raw = env.get("GATEWAY_LIVE_UPSTREAMS", "").strip()
    try:
        live = parse_live(json.loads(live_raw)) if live_raw else ()
    except json.JSONDecodeError as err:
        raise GatewayConfigError(f"GATEWAY_LIVE_UPSTREAMS is not JSON: {err.msg} at {err.pos}") from err
    except ValueError as err:
        raise GatewayConfigError(str(err)) from err
    numbers: dict[str, Any] = {field_name(name): _limited(env, name) for name in LIMITS}
    return GatewayConfig(
        upstream=check_upstream(env.get("GATEWAY_UPSTREAM", "").strip() or DEFAULT_UPSTREAM),
        upstream_candidates=tuple(check_upstream(url, CANDIDATES) for url in _items(env, CANDIDATES)),
        host=env.get("GATEWAY_HOST", "").strip() or "0.0.0.0",
        served_name=served,
        control_socket=socket_path,
        log_level=_choice(env, "GATEWAY_LOG_LEVEL", LOG_LEVELS, "info"),
        state_dir=state_dir,
        api_key=env.get("VLLM_API_KEY", ""),
        switch_on_model=_flag(env, "GATEWAY_SWITCH_ON_MODEL", False),
        continue_streams=_flag(env, "GATEWAY_CONTINUE_STREAMS", True),
        aliases=_aliases(_items(env, "GATEWAY_ALIASES"), served),
        policy=policy,
        workloads=workloads,
        live_upstreams=live,
        settings=tuple((name, env[name].strip()) for name in LIVE if env.get(name, "").strip()),
        **numbers,
    )


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw not in ("", "true", "false", "1", "0"):
        raise _invalid(name, raw, "true, false")
    return default if not raw else raw in ("true", "1")


def _items(env: Mapping[str, str], name: str) -> list[str]:
    return [item.strip() for item in env.get(name, "").split(",") if item.strip()]


def _aliases(items: list[str], served: str) -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    for item in items:
        alias, sep, variant = item.partition("=")
        if not sep or not alias.strip() or not variant.strip():
            raise GatewayConfigError(f"GATEWAY_ALIASES item {item!r} is invalid; allowed: ALIAS=VARIANT")
        alias = alias.strip()
        if alias == served:
            raise GatewayConfigError(f"GATEWAY_ALIASES: alias {alias!r} is the served name")
        if alias in pairs:
            raise GatewayConfigError(f"GATEWAY_ALIASES: alias {alias!r} is given twice")
        pairs[alias] = variant.strip()
    return tuple(pairs.items())
