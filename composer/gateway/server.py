"""Entry point of the gateway container: `python3 -m composer.gateway`.

Reads the settings from the environment (a bad value: one line on stderr, exit 2), then serves
until SIGTERM/SIGINT (exit 0), or until its port holder's network is gone (exit 75, `netwatch`:
Docker starts it again in the holder's new network). Uses uvloop when it is installed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys

from composer.errors import GatewayConfigError
from composer.gateway.config import load_config
from composer.gateway.routing import netwatch


def main() -> int:
    """Run the gateway; returns the process exit code."""
    try:
        config = load_config(os.environ)
    except GatewayConfigError as err:
        print(f"gateway: {err}", file=sys.stderr)
        return err.exit_code
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if config.log_level != "debug":  # httpx logs every readiness probe and forwarded request at info
        logging.getLogger("httpx").setLevel(logging.WARNING)
    from composer.gateway.runtime import (
        GatewayServer,  # the server's dependencies load only after the settings are valid
    )

    server = GatewayServer(config)
    # What the imports made lives as long as the process: a full collection that scanned it
    # paused every stream for up to 114 ms with 512 held (31 ms frozen, 12 ms with these thresholds).
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)
    netwatch.start()  # a lost network (the port holder restarted): exit, Docker starts it again
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    try:
        run(server.serve())
    except OSError as err:
        print(f"gateway: cannot serve: {err}", file=sys.stderr)
        return 1
    except SystemExit as err:  # uvicorn exits 1 when a port cannot be bound
        return int(err.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
