"""How a stop signal ends a command, and how the undo it starts finishes.

A stop signal is SIGINT, SIGTERM or SIGHUP (one ignored by `nohup` stays ignored). While a
command runs, each raises KeyboardInterrupt in the main thread (`interrupts`); a change of what
serves takes the first one only (`interrupt_once`) and runs its undo with stop signals ignored
(`interrupts_ignored`). A change in a worker thread is stopped through its waits instead: under
`waits_cancelled`, every retry policy's pause raises KeyboardInterrupt, except inside an undo.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))

_waits_cancelled = threading.Event()
_undo = threading.local()


@contextmanager
def handled(handler: Callable[[int, object], None] | int) -> Iterator[None]:
    """Handle the stop signals with `handler` inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hangup = getattr(signal, "SIGHUP", None)  # one ignored (`nohup`) stays ignored
    kept = [s for s in STOP_SIGNALS if s != hangup or signal.getsignal(s) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handler) for sig in kept}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def interrupts() -> AbstractContextManager[None]:
    """While a command runs, every stop signal raises KeyboardInterrupt."""
    return handled(signal.default_int_handler)


def interrupt_once(signum: int, frame: object) -> None:
    """Raise KeyboardInterrupt once; ignore every stop signal from inside the handler on (none
    lands between the interruption and the undo it starts)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


@contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Let an undo or a release finish: stop signals are ignored, and cancelled waits go on."""
    before = getattr(_undo, "active", False)
    _undo.active = True
    try:
        with handled(signal.SIG_IGN):
            yield
    finally:
        _undo.active = before


@contextmanager
def waits_cancelled() -> Iterator[None]:
    """Inside the block, waits outside an undo raise KeyboardInterrupt in every thread."""
    _waits_cancelled.set()
    try:
        yield
    finally:
        _waits_cancelled.clear()


def pause(seconds: float) -> None:
    """The sleep of the retry policies: KeyboardInterrupt when waits are cancelled (not in an undo)."""
    if getattr(_undo, "active", False):
        time.sleep(seconds)
    elif _waits_cancelled.wait(seconds):
        raise KeyboardInterrupt
