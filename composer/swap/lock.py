"""A per-project file lock so that one swap runs at a time; released when the process dies."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from composer.errors import LockBusy


def lock_path(project: str) -> Path:
    """Where the lock of a compose project lives."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"vllm-composer-{project}.lock"


@contextmanager
def swap_lock(
    project: str, wait: bool = True, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold the project's swap lock; wait for it (telling on_wait) or raise LockBusy."""
    path = lock_path(project)
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if not wait:
                raise LockBusy(
                    f"another swap of project {project!r} is running (pid {holder}); "
                    "retry later or drop --no-wait"
                ) from None
            if on_wait:
                on_wait(f"waiting for another swap of project {project!r} (pid {holder}) to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()
