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
  `keepalive`, `status`, `throughput`, `switchstore`) use only the standard library, starlette, uvicorn with
  httptools (`limits` builds the public port's HTTP protocol on it), httpx, aiohttp (the
  forwarding client) and prometheus_client; `paths`, `routes` and `listing` (the canonical
  path, the allow-list of forwarded routes, the model list with its aliases) only the
  standard library. The image copies only `composer/__init__.py`, `composer/errors.py` and
  this package (Python files only: the status page is a Python module). This module imports
  only standard-library modules, so host code can use the client and the settings without
  the server's dependencies.

Public: `GatewayControl`, `GatewayState`, `HoldInfo`, `DrainReport`, `BackendReply`,
`GatewayConfig`, `load_config`, `ENV_VARS`, `GatewayError`, `GatewayConfigError`,
`GatewayControlError`, `PUBLIC_PATHS`, `DEV_ROUTES`.
"""

from composer.errors import GatewayConfigError, GatewayControlError, GatewayError

from .client import BackendReply, DrainReport, GatewayControl, GatewayState, HoldInfo
from .config import ENV_VARS, GatewayConfig, load_config
from .routes import DEV_ROUTES, PUBLIC_PATHS

__all__ = [
    "DEV_ROUTES",
    "ENV_VARS",
    "PUBLIC_PATHS",
    "BackendReply",
    "DrainReport",
    "GatewayConfig",
    "GatewayConfigError",
    "GatewayControl",
    "GatewayControlError",
    "GatewayError",
    "GatewayState",
    "HoldInfo",
    "load_config",
]
