"""The gateway: the proxy that owns the shared port, and the client that controls it.

Owns: the gateway server (its own container: `python3 -m composer.gateway`), its settings
  (`GATEWAY_*` variables), its control channel (a UNIX socket in the container, reached with
  `python3 -m composer.gateway.ctl` through `docker exec`), the host-side `GatewayControl`
  that the swap uses to hold, drain, route and release, and the public port's
  `/gateway/status` (JSON, behind the API key) and `/gateway/ui` (the status page).
May import: `composer.errors` only. The server modules use only the standard library,
  starlette, uvicorn with httptools, httpx, aiohttp and prometheus_client; `paths`, `routes`,
  `listing`, `routing` and `policy` only the standard library. The image copies only
  `composer/__init__.py`, `composer/errors.py` and this package's Python files. This module
  imports only standard-library modules, so host code can use the client and the settings
  without the server's dependencies.

Floors (subpackages, each opening with its contract): `public` (the data path a client's
request takes: edge limits, path screen, key check, forwarding, continuation), `routing`
(which member serves, and when: the gate, the member set, switching, the policy), `control`
(the control channel and the switch history), `status` (the status page, its JSON, the
metrics) and `host` (the client; the server never imports it). `wire` holds what both ends
agree on; the root holds the settings (`config`), the assembly (`runtime`, `server`) and `ctl`.

Upstreams (the contract with the renderer and `up`, docs/gateway.md): requests go to the live
set (`GATEWAY_LIVE_UPSTREAMS`, a JSON list of `{"name": "mtp/1", "variant": "mtp", "url": ...}`,
or `GatewayControl.set_upstreams`; new members count as ready: the host gates them first), else
to the single member (`GATEWAY_UPSTREAM`, then `GatewayControl.route`, which also names its
variant). A member left out gets no new requests; `GatewayControl.drain_upstream` waits for its
in-flight ones. The gateway keeps what serves in its state folder: a restart or a replacement
knows it (`/gateway/status`, the serving metric, the next switch's history).

Public: `GatewayControl` and its replies (`GatewayState`, `HoldInfo`, `DrainReport`,
`DrainProgress`, `UpstreamInfo`, `UpstreamDrain`, `BackendReply`), `Tether` and `Session` (a
swap's holds tied to its process), `LiveSpec`, `GatewayConfig`, `load_config`, `ENV_VARS`,
`GatewayError`, `GatewayConfigError`, `GatewayControlError`, `PUBLIC_PATHS`, `DEV_ROUTES`.
"""

from composer.errors import GatewayConfigError, GatewayControlError, GatewayError
from composer.gateway.config import ENV_VARS, GatewayConfig, LiveSpec, load_config
from composer.gateway.host.client import (
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
from composer.gateway.public.routes import DEV_ROUTES, PUBLIC_PATHS

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
