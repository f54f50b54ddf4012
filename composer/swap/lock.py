"""The swap lock: one swap of a compose project at a time; released when its holder dies.

Per user, per project, per machine: `<home>/.local/state/vllm-composer/locks/P.lock` (<home>
from the password database; `/tmp/vllm-composer-<uid>-locks/` without an entry), found from
the user id alone, so no environment variable moves it, except $VLLM_COMPOSER_LOCK_DIR
(absolute), which the `follow` profile's container sets to the host user's lock folder,
mounted at the same path. Two users hold different locks: give a project to one user.

Safety: the directory must be the user's own, not writable by group or others (created
0700); the file is opened without following links or truncating, must be a regular file of
the user's with one link, and gets the holder's pid (shown to a waiter only when it names a
live process). The holder removes the file while still holding the lock; a waiter that then
gets the removed file's lock tries the new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from composer.engine import retry
from composer.errors import LockBusy, LockError
from composer.render.follow import LOCK_DIR_VAR  # an absolute path; set by the follow profile

_PID = re.compile(r"[0-9]{1,10}")
_held: dict[str, int] = {}  # project -> the lock file's descriptor, while this process holds it
_handed: set[str] = set()  # projects whose lock this process handed to a forked watcher
_PROJECT = re.compile(r"[a-z0-9][a-z0-9_-]*")


def lock_dir() -> Path:
    """The user's lock directory, derived from the user id only (or $VLLM_COMPOSER_LOCK_DIR)."""
    moved = os.environ.get(LOCK_DIR_VAR, "")
    if moved.startswith("/"):  # the follow profile's container: the host's folder, mounted
        return Path(moved)
    uid = os.geteuid()
    try:
        home = Path(pwd.getpwuid(uid).pw_dir)
    except KeyError:  # a user id without a passwd entry (some containers): sticky /tmp
        return Path("/tmp") / f"vllm-composer-{uid}-locks"
    return home / ".local" / "state" / "vllm-composer" / "locks"


def lock_path(project: str, directory: Path | None = None) -> Path:
    """Where the lock of a compose project lives."""
    return (directory or lock_dir()) / f"{project}.lock"


@contextmanager
def swap_lock(
    project: str,
    wait: bool = True,
    on_wait: Callable[[str], None] | None = None,
    directory: Path | None = None,
) -> Iterator[None]:
    """Hold the project's swap lock; wait for it (telling on_wait) or raise LockBusy."""
    if not _PROJECT.fullmatch(project):
        raise LockError(f"cannot lock project {project!r}: not a compose project name")
    path = lock_path(project, directory)
    dir_fd = _open_directory(path.parent)
    try:
        fd = _acquire(dir_fd, path, project, wait, on_wait)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _held[project] = fd
            yield
        finally:
            _held.pop(project, None)
            if project not in _handed:  # a watcher that holds it now prunes it at its end
                with contextlib.suppress(OSError):  # prune while the lock is still ours
                    os.unlink(path.name, dir_fd=dir_fd)
            _handed.discard(project)
            os.close(fd)
    finally:
        os.close(dir_fd)


def hand_over(project: str, pid: int) -> None:
    """The lock held here goes on with `pid`, a forked child that shares its descriptor (flock
    locks belong to the open file, so the lock lasts until the child closes it or ends): the
    file names it, and this holder leaves the file in place when it lets go."""
    fd = _held.get(project)
    if fd is None:
        return
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{pid}\n".encode(), 0)
    _handed.add(project)


def _open_directory(folder: Path) -> int:
    """Create (0700) and open the lock directory; refuse one that others could write."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise LockError(f"cannot use {folder} for swap locks: {err.strerror or err}") from err
    info = os.fstat(fd)
    problem = None
    if info.st_uid != os.geteuid():
        problem = f"it belongs to uid {info.st_uid}, not to uid {os.geteuid()}"
    elif info.st_mode & 0o022:
        problem = f"group or others may write to it (mode {info.st_mode & 0o777:o}): run chmod 700 {folder}"
    if problem:
        os.close(fd)
        raise LockError(f"refusing the lock directory {folder}: {problem}")
    return fd


def _open_file(dir_fd: int, path: Path) -> int | None:
    """Open (create 0600) the lock file: never through a link, never truncated, ours only; None
    when its holder removed it between our open and our check (try again)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path.name, flags, 0o600, dir_fd=dir_fd)
    except OSError as err:
        raise LockError(f"refusing the swap lock {path}: {err.strerror or err}") from err
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
        os.close(fd)
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
        os.close(fd)
        owner = os.geteuid()
        raise LockError(f"refusing the swap lock {path}: not a regular file of uid {owner} with one link")
    return fd


def _acquire(dir_fd: int, path: Path, project: str, wait: bool, on_wait: Callable[[str], None] | None) -> int:
    """Lock the file the name leads to; retry when its holder removed it meanwhile."""
    told = False

    def attempt() -> int:
        nonlocal told
        fd = _open_file(dir_fd, path)
        if fd is None:
            raise retry.Pending("the lock file was removed by its holder meanwhile")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                if not wait:
                    raise LockBusy(
                        f"another swap of project {project!r} is running ({holder}); "
                        "retry later or drop --no-wait"
                    ) from None
                if on_wait and not told:
                    on_wait(f"waiting for another swap of project {project!r} ({holder}) to finish")
                    told = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _still_named(dir_fd, path.name, fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        raise retry.Pending("the lock file was removed by its holder while we waited")

    return retry.reopen()(attempt)


def _still_named(dir_fd: int, name: str, fd: int) -> bool:
    """True when `name` in the lock directory is still the file we hold open."""
    try:
        named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _holder(fd: int) -> str:
    """`pid N` when the lock file names a live process by digits alone, else a neutral phrase."""
    text = os.pread(fd, 16, 0).decode("ascii", errors="replace").strip()
    if _PID.fullmatch(text) and Path(f"/proc/{int(text)}").is_dir():
        return f"pid {int(text)}"
    return "another process"
