"""Every exception of the toolkit: one base class, one subclass per kind of failure.

The CLI maps them to exit codes in one place: `UsageError` (and `ConfigError`) exit 2,
every other `ComposerError` exits 1. `DiagnosedError` carries a container's log tail
and the hints that match it. This module uses only the standard library: the gateway's
image ships it beside `composer/gateway/`.
"""

from __future__ import annotations


class ComposerError(Exception):
    """Base of every error the toolkit reports to a user (exit code 1)."""

    exit_code = 1


class UsageError(ComposerError):
    """The user asked for something that does not exist or cannot be combined (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration value is missing or invalid (exit 2)."""


class RenderError(ComposerError):
    """A template could not be rendered or written."""


class DockerUnavailable(ComposerError):
    """The Docker engine or the Compose v2 plugin cannot be reached."""


class DiagnosedError(ComposerError):
    """A failure seen in a container: carries its (redacted) log tail and matching hints."""

    def __init__(self, message: str, log_tail: str = "", hints: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.hints = hints


class HealthCheckFailed(DiagnosedError):
    """A container did not become ready."""


class SwapFailed(DiagnosedError):
    """A swap failed; says whether the previous variant was brought back."""

    def __init__(
        self, message: str, log_tail: str = "", hints: tuple[str, ...] = (), rolled_back: bool = False
    ) -> None:
        super().__init__(message, log_tail, hints)
        self.rolled_back = rolled_back


class LockBusy(ComposerError):
    """Another swap holds the lock and the caller chose not to wait."""


class LockError(ComposerError):
    """The swap lock's directory or file is unsafe to use (a link, not ours, writable by others)."""


class ImageBuildError(ComposerError):
    """An overlay image could not be validated, built or verified."""


class PreflightFailed(ComposerError):
    """A check before a swap failed; nothing was changed."""


class GpuProbeError(ComposerError):
    """The GPU tool is present but could not answer."""


class CheckpointError(ComposerError):
    """A checkpoint file is missing or unreadable."""


class BenchError(ComposerError):
    """A benchmark request or measurement failed."""


class KubectlFailed(ComposerError):
    """A `kubectl` command failed or did not finish; carries the command and its output."""

    def __init__(self, message: str, command: tuple[str, ...] = (), returncode: int | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.returncode = returncode


class GatewayError(ComposerError):
    """Base of every gateway error reported to a user (exit code 1)."""


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
