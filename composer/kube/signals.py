"""Signals during a rollout: the first Ctrl-C, SIGTERM or SIGHUP interrupts it (and starts
the undo); the ones after it are ignored until the undo is done."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals(handler: Callable[[int, object], None] | int) -> Iterator[None]:
    """Handle the stop signals with `handler` inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def interrupt_once(signum: int, frame: object) -> None:
    """Raise KeyboardInterrupt once; ignore every stop signal from here on (no second one can
    land between the interruption and the undo it starts)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def interrupts_ignored() -> AbstractContextManager[None]:
    """Let an undo and a release finish: stop signals are ignored while they run."""
    return stop_signals(signal.SIG_IGN)
