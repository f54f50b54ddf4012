"""The one signal handler: SIGTERM and SIGHUP (a closed terminal) end a command like Ctrl-C
(SIGINT) does."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """While a command runs, SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt (a swap rolls
    back, a sweep restores the previous variant, a follower stops); the old handlers come back
    after. A SIGHUP that was ignored (`nohup`) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = [signal.SIGINT, signal.SIGTERM]
    hangup = getattr(signal, "SIGHUP", None)
    if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN:
        signals.append(hangup)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in previous:
        signal.signal(sig, _raise_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
