"""The gateway: the proxy that owns the shared port, and the client that controls it.

Owns: the gateway server (runs in its own container: `python3 -m composer.gateway`), its
  settings (`GATEWAY_*` environment variables), its control channel (a UNIX socket inside the
  container, reached with `python3 -m composer.gateway.ctl` through `docker exec`), and the
  host-side `GatewayControl` that the swap uses to hold, drain, route and release.
  The public port also serves `/gateway/status` (JSON, behind the API key) and
  `/gateway/ui` (a self-contained status page): `status`, `page`, `switchlog`, `throughput`;
  the switch history is kept in `GATEWAY_STATE_DIR` across restarts (`switchstore`).
May import: `composer.errors` only. The server modules (`runtime`, `proxy`, `control`,
  `gate`, `upstream`, `metrics`, `server`, `ctl`, `screen`, `limits`, `http10`, `answers`,
  `keepalive`, `status`, `throughput`, `live`, `switchstore`, `continuation`) use only the
  standard library, starlette, uvicorn with httptools (`limits` builds the public port's
  HTTP protocol on it), httpx, aiohttp (the forwarding client) and prometheus_client;
  `paths`, `routes` and `listing` (the canonical path, the allow-list of forwarded routes,
  the model list with its aliases) and `routing` (the live set's pure decision, with
  `policy`) only the standard library. The image copies only `composer/__init__.py`,
  `composer/errors.py` and this package (Python files only: the status page is a Python
  module). This module imports only standard-library modules, so host code can use the
  client and the settings without the server's dependencies.

Upstreams (the contract with the stack's renderer and `up`): the gateway forwards to a set of
members (`live`: one readiness watcher and outstanding count each, one routing decision, one
failover); without a live set, the set of one that follows `/route` (the single
`GATEWAY_UPSTREAM`). `GATEWAY_LIVE_UPSTREAMS`, a JSON list of `{"name": "mtp/1", "variant":
"mtp", "url": "http://vllm-mtp-1:8000"}`, replaces it. The gate holds while no member is
ready. Each request goes to one ready member (`routing`, pure): an alias names a variant; else
the request's class (prompt-size estimate, `[workloads]` in `GATEWAY_WORKLOADS`, whose
optional CROSSOVER field bounds a class's variant's outstanding requests) picks the variant;
among its replicas the least loaded; with `GATEWAY_SPILL=N` (0: off) a request goes instead to
another variant's least loaded member when that one has N fewer outstanding than the chosen
one has of its own and stays, with it, below its variant's lowest crossover
(`routing.capacity`; spilled requests do not count against their new member's classes). A live
member's response carries `x-served-by: <name>`. A stream whose member breaks mid-way goes on
on another member (or the same once it is back), token for token (`continuation`,
GATEWAY_CONTINUE_STREAMS). A member whose connection fails is taken out until its own health
check (`/health`, `/is_sleeping`, `/v1/models`) passes; requests that had not reached it go to
the others, or wait. A holder's probe passes the hold and readiness to the least loaded
member. Control: `POST /upstreams {"upstreams": [...]}` replaces the set
(`GatewayControl.set_upstreams`: new members count as ready, the host gates them first; `[]`:
back to the set of one); a member left out gets no new requests and
`GatewayControl.drain_upstream(name, timeout_s)` waits for its in-flight ones before the host
stops its container. `GatewayControl.state().upstreams` (control `/state`, and
`/gateway/status`) lists each live member with name, variant, url, ready, outstanding,
requests, served, served_1m (in the last minute), spilled, errors, leaving; `upstream` and
`single_outstanding` are the single member's URL and requests in flight. With a live set the
automatic policy raises no switch demands, and `route`, the dev routes (`backend`) and
`/gateway/status`'s throughput still use the single member's URL.

Public: `GatewayControl`, `GatewayState`, `HoldInfo`, `DrainReport`, `DrainProgress` (a
drain's progress: in flight, seconds of the timeout), `Tether` (a `ctl tether` session that
ties a swap's holds to its process), `Session` (a `ctl session`: a tether that also carries
every later call of its `GatewayControl`, so a swap's control channel is one `docker exec`;
`GatewayControl.tether` opens it, or a plain tether on an older gateway image),
`BackendReply`, `UpstreamInfo`, `UpstreamDrain`,
`LiveSpec`, `GatewayConfig`, `load_config`, `ENV_VARS`, `GatewayError`, `GatewayConfigError`,
`GatewayControlError`, `PUBLIC_PATHS`, `DEV_ROUTES`.
"""

from composer.errors import GatewayConfigError, GatewayControlError, GatewayError

from .client import (
    BackendReply,
    DrainProgress,
    DrainReport,
    GatewayControl,
    GatewayState,
    HoldInfo,
    Session,
    Tether,
    UpstreamDrain,
    UpstreamInfo,
)
from .config import ENV_VARS, GatewayConfig, LiveSpec, load_config
from .routes import DEV_ROUTES, PUBLIC_PATHS

__all__ = [
    "DEV_ROUTES",
    "ENV_VARS",
    "PUBLIC_PATHS",
    "BackendReply",
    "DrainProgress",
    "DrainReport",
    "GatewayConfig",
    "GatewayConfigError",
    "GatewayControl",
    "GatewayControlError",
    "GatewayError",
    "GatewayState",
    "HoldInfo",
    "LiveSpec",
    "Session",
    "Tether",
    "UpstreamDrain",
    "UpstreamInfo",
    "load_config",
]
