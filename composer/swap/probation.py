"""The probation in the background: `up` returns when the new variant serves; a watcher process
goes on watching it for the rest of the window and rolls it back on a crash.

`detach` forks the swap at its last operation (`ops.Probation`): the watcher is the same swap,
with the same plan, the same executor and the same undo, in a new session (no terminal: SIGHUP
and SIGINT ignored; SIGTERM still rolls back, as Ctrl-C did) whose output goes to the project's
state folder (`probation.log`). It keeps the project's swap lock (`lock.hand_over`) and the
running record (stage `on probation`, with the end of the window: `status` shows it), and
writes how the probation ended to the history. The next change of the project (`up`, `down`,
`--recreate-gateway`) ends a running probation first (`end_probation`: the user moved on; the
variant stays as it serves) and then takes the lock. `up --wait-probation` waits through it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from composer.swap import lock
from composer.swap.journal import project_dir, running_swap

LOG = "probation.log"
STAGE = "on probation"
END_SIGNAL = signal.SIGUSR1
END_WAIT_S = 30.0  # how long the next change waits for an ended probation to let go of the lock


class ProbationEnded(BaseException):
    """The next change of the project ended the probation (raised by END_SIGNAL in the watcher)."""


_watcher = False
_asked = False  # END_SIGNAL came before the watch began


def is_watcher() -> bool:
    """True in the watcher process (after `detach`)."""
    return _watcher


def detach(project: str) -> int:
    """Fork the swap: 0 in the watcher (detached, see above), the watcher's pid in `up`, which
    hands it the lock and returns. Flush what was said before: both processes would say it."""
    global _watcher
    log = project_dir(project) / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    pid = os.fork()
    if pid:
        lock.hand_over(project, pid)
        return pid
    _watcher = True
    os.setsid()
    signal.signal(END_SIGNAL, _ask)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    os.close(null)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own descriptors
    sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    return 0


def _ask(signum: int, frame: object) -> None:
    global _asked
    _asked = True


def _end(signum: int, frame: object) -> None:
    signal.signal(END_SIGNAL, signal.SIG_IGN)
    raise ProbationEnded


@contextmanager
def ending() -> Iterator[None]:
    """Inside the block END_SIGNAL raises ProbationEnded (only there: never in an undo); one
    that came before raises it at once."""
    signal.signal(END_SIGNAL, _end)
    try:
        if _asked:
            raise ProbationEnded
        yield
    finally:
        signal.signal(END_SIGNAL, signal.SIG_IGN)


@contextmanager
def watcher_exits() -> Iterator[None]:
    """Around the swap: the watcher ends here (its outcome in its log), never returning to a caller."""
    code = 1
    try:
        yield
        code = 0
    except BaseException as err:
        if not _watcher:
            raise
        print(f"the probation ended: {err}", file=sys.stderr)
    finally:
        if _watcher:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os._exit(code)


def end_probation(project: str, say: Callable[[str], None]) -> None:
    """Before a change of `project`: end its running probation (the variant stays as it serves),
    and wait a little for its watcher to let go of the lock."""
    record = running_swap(project)
    if record is None or record.until is None:  # none, or a swap that waits through it itself
        return
    say(f"ending {record.target}'s probation (pid {record.pid}): a new change of the project was asked")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(record.pid, END_SIGNAL)
    end = time.monotonic() + END_WAIT_S
    while record.alive() and time.monotonic() < end:
        time.sleep(0.1)


@contextmanager
def change_lock(project: str, wait: bool, say: Callable[[str], None]) -> Iterator[None]:
    """The project's swap lock for a change, a running probation ended first (see above)."""
    end_probation(project, say)
    with lock.swap_lock(project, wait, say):
        yield


def log_path(project: str) -> Path:
    return project_dir(project) / LOG
