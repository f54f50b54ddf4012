"""The gateway's watch on the network it serves from (standard library only).

The gateway runs in its port holder's network namespace (`network_mode: service:gateway-port`):
the holder publishes the port. When the holder's process dies and Docker restarts it, the holder
gets a new namespace, and the gateway would stay in the old one, whose interfaces Docker removed:
the port refuses everything while both containers show `Up`. So a thread looks at the
namespace's interfaces a few times a second; once only the loopback is left, the gateway exits
(status `EXIT_NETWORK_GONE`) and Docker's restart policy starts it again in the holder's new
namespace (a restart resolves the holder anew). It first waits for the holder to be started again
(its `/etc/hosts`, which the gateway shares, is rewritten at the holder's start; at most
`HOLDER_WAIT_S`): a gateway started while its holder is down cannot join it and stays exited.
A namespace that never had an interface besides the loopback is not watched.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger("gateway")

EVERY_S = 0.2  # seconds between two looks at the interfaces
HOLDER_WAIT_S = 5.0  # seconds to wait for the holder's restart before exiting anyway
GRACE_S = 0.5  # seconds after the holder's files were rewritten: it runs by then
EXIT_NETWORK_GONE = 75
HOSTS = "/etc/hosts"


def interfaces() -> set[str]:
    """The names of this network namespace's interfaces but the loopback."""
    return {name for _, name in socket.if_nameindex() if name != "lo"}


def _stamp(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def network_gone(
    look: Callable[[], set[str]] = interfaces,
    stamp: Callable[[], float | None] = lambda: _stamp(HOSTS),
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """Block until the namespace lost its interfaces and the holder restarted (or HOLDER_WAIT_S
    passed): the line to log. None at once when there is nothing to watch."""
    had = look()
    if not had:
        return None
    started = stamp()
    while look():
        sleep(EVERY_S)
    lost = clock()
    while stamp() == started and clock() - lost < HOLDER_WAIT_S:
        sleep(EVERY_S)
    back = stamp() != started
    if back:
        sleep(GRACE_S)
    how = "its port holder restarted" if back else f"its port holder did not restart in {HOLDER_WAIT_S:.0f}s"
    return (
        f"the network this gateway serves from lost its interfaces ({', '.join(sorted(had))}): {how}; "
        "exiting so that Docker starts the gateway again in the holder's network"
    )


def start(exit_process: Callable[[int], object] = os._exit) -> threading.Thread:
    """Watch in a daemon thread; exits the process when the network is gone."""

    def run() -> None:
        try:
            line = network_gone()
        except OSError as err:  # no interface list here: nothing to watch
            log.warning("the gateway's network is not watched: %s", err)
            return
        if line is not None:
            log.error(line)
            for handler in logging.getLogger().handlers:
                handler.flush()
            exit_process(EXIT_NETWORK_GONE)

    thread = threading.Thread(target=run, name="network-watch", daemon=True)
    thread.start()
    return thread
