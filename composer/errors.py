"""Every exception of the toolkit: one base class, one subclass per kind of failure.

The CLI maps them to exit codes in one place: `UsageError` (and `ConfigError`) exit 2, every
other `ComposerError` 1; `kind` names the family `--json` reports. Standard library only: the
gateway's image ships this module beside `composer/gateway/`.
"""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable
from pathlib import Path


class ComposerError(Exception):
    """Base of every error the toolkit reports to a user (exit code 1)."""

    exit_code = 1
    kind = "failure"

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.details: dict[str, object] = {}  # extra fields of the `--json` error object


class UsageError(ComposerError):
    """The user asked for something that does not exist or cannot be combined (exit 2)."""

    exit_code = 2
    kind = "usage"


class ConfigError(UsageError):
    """A configuration value is missing or invalid (exit 2)."""

    kind = "config"


class RenderError(ComposerError):
    """A template could not be rendered or written."""

    kind = "render"


class DockerUnavailable(ComposerError):
    """The Docker engine or the Compose v2 plugin cannot be reached."""

    kind = "docker"


class DiagnosedError(ComposerError):
    """A failure seen in a container: carries its (redacted) log tail and matching hints."""

    kind = "container"

    def __init__(self, message: str, log_tail: str = "", hints: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.hints = hints
        self.tail_shown = False  # True once the log tail was printed (before a rollback)


class HealthCheckFailed(DiagnosedError):
    """A container did not become ready."""

    kind = "health"


class SwapFailed(DiagnosedError):
    """A swap failed; says whether the previous variant was brought back."""

    kind = "swap"

    def __init__(
        self, message: str, log_tail: str = "", hints: tuple[str, ...] = (), rolled_back: bool = False
    ) -> None:
        super().__init__(message, log_tail, hints)
        self.rolled_back = rolled_back


class LockError(ComposerError):
    """The swap lock is held by another swap and the caller chose not to wait (`LockBusy`), or
    its directory or file is unsafe to use (a link, not ours, writable by others)."""

    kind = "lock"


LockBusy = LockError


class ImageBuildError(ComposerError):
    """An overlay image could not be validated, built or verified."""

    kind = "build"


class PreflightFailed(ComposerError):
    """A check before a swap failed; nothing was changed."""

    kind = "preflight"


class DownRefused(ComposerError):
    """`down VARIANT` would leave nothing serving (use --force); nothing was changed."""

    kind = "down"


class GpuProbeError(ComposerError):
    """The GPU tool is present but could not answer."""

    kind = "gpu"


class CheckpointError(ComposerError):
    """A checkpoint file is missing or unreadable."""

    kind = "checkpoint"


class BenchError(ComposerError):
    """A benchmark request or measurement failed."""

    kind = "bench"


class ChecksFailed(ComposerError):
    """`doctor` found at least one failing check."""

    kind = "doctor"


class Interrupted(ComposerError):
    """The user interrupted the command (Ctrl-C or SIGTERM); exit 130 like a shell."""

    exit_code = 130
    kind = "interrupted"


class KubectlFailed(ComposerError):
    """A `kubectl` command failed or did not finish; carries the command and its output."""

    kind = "kubernetes"

    def __init__(self, message: str, command: tuple[str, ...] = (), returncode: int | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.returncode = returncode


class GatewayError(ComposerError):
    """Base of every gateway error reported to a user (exit code 1)."""

    kind = "gateway"


class GatewayConfigError(GatewayError):
    """A gateway setting is missing or invalid (exit code 2); the message names it."""

    exit_code = 2


class GatewayControlError(GatewayError):
    """A control verb failed: carries the verb, the exit code and what the control tool said."""

    def __init__(self, verb: str, message: str, exit_code: int = 1, output: str = "") -> None:
        super().__init__(f"gateway control {verb!r} failed: {message}")
        self.verb = verb
        self.returncode = exit_code
        self.output = output


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """` did you mean 'mtp'?` for the closest choice (difflib), or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" did you mean {close[0]!r}?" if close else ""


def unknown_choice(what: str, name: str, choices: Iterable[str]) -> UsageError:
    """`unknown variant 'mpt': did you mean 'mtp'? choose one of ...` (exit 2)."""
    known = sorted(choices)
    hint = did_you_mean(name, known)
    return UsageError(f"unknown {what} {name!r}:{hint} choose one of " + ", ".join(known))


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
"""A write failed for want of room (a full disk, a quota) or a read-only file system."""


def cannot_write(path: str | Path | None, err: OSError) -> str:
    """`cannot write PATH: REASON`; a full disk, a quota or a read-only file system name the
    folder and what frees it."""
    reason = err.strerror or str(err)
    if err.errno not in DISK_FULL:
        return f"cannot write {path}: {reason}"
    folder = Path(path).parent if path else "the state folder ($XDG_STATE_HOME/vllm-composer)"
    fix = "make it writable" if err.errno == errno.EROFS else "free some space there"
    return f"cannot write in {folder}: {reason}: {fix}, then run the command again"
