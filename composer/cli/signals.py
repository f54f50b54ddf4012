"""The one signal handler: SIGTERM ends a command like Ctrl-C (SIGINT) does."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """While a command runs, SIGINT and SIGTERM raise KeyboardInterrupt (a swap rolls back,
    a sweep restores the previous variant, a follower stops); the old handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, _raise_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
