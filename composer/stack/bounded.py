"""Every file the toolkit reads, read with a size limit (`read_bounded`: past it a one-line
`FileTooLarge`, exit 2, after at most `limit + 1` bytes), and the one way it replaces a file
(`replace_file`, `temp_beside`).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from composer.errors import ConfigError, UsageError

KIB = 1 << 10
MIB = 1 << 20
STACK_FILE_LIMIT = 4 * MIB  # composer.toml files, env files, prompt files
RUN_FILE_LIMIT = 4 * MIB  # rendered compose files read back (run files, the gateway's file)
HISTORY_LIMIT = 4 * MIB  # the swap history (trimmed far below this)
RECORD_LIMIT = 256 * KIB  # the running swap's record, a failed swap's record
BENCH_FILE_LIMIT = 64 * MIB  # a benchmark's results (bench.json)


class FileTooLarge(ConfigError):
    """A file is larger than what its kind may be (exit 2)."""


def _size(limit: int) -> str:
    for unit, factor in (("MiB", MIB), ("KiB", KIB)):
        if limit >= factor and limit % factor == 0:
            return f"{limit // factor} {unit}"
    return f"{limit} bytes"


def read_bounded(path: str | Path, what: str, limit: int, *, tail: bool = False) -> bytes:
    """The bytes of `path`, at most `limit`: FileTooLarge past it, OSError when unreadable;
    with `tail`, a larger regular file gives its last `limit` bytes instead."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO without writer: no hang
    with os.fdopen(fd, "rb") as handle:
        os.set_blocking(fd, True)
        info = os.fstat(fd)
        regular = stat.S_ISREG(info.st_mode)
        if tail and regular and info.st_size > limit:
            handle.seek(info.st_size - limit)
            return handle.read(limit)
        data = handle.read(limit + 1)
    if len(data) > limit:
        size = f"{info.st_size} bytes" if regular else "without end"
        raise FileTooLarge(
            f"{what} {str(path)!r} is larger than {_size(limit)} ({size}): "
            f"give a file of at most {_size(limit)}"
        )
    return data


def read_named_text(path: str | Path, what: str) -> str:
    """A user-named file's UTF-8 text (at most STACK_FILE_LIMIT bytes); UsageError when unreadable."""
    try:
        return read_bounded(path, what, STACK_FILE_LIMIT).decode("utf-8")
    except OSError as err:
        raise UsageError(f"cannot read the {what} {str(path)!r}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise UsageError(f"the {what} {str(path)!r} is not UTF-8 text (byte {err.start})") from err


def temp_beside(path: Path, data: bytes, mode: int) -> Path:
    """`data` in a new temp file in `path`'s folder, with `mode` (on an error none is left)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Replace (or create) `path` through a synced temp file: readers see old or new, never a part."""
    tmp = temp_beside(path, data, mode)
    try:
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
