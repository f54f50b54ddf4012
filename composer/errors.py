"""The toolkit's exceptions: one base class, one subclass per kind of failure."""

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


class HealthCheckFailed(ComposerError):
    """A container did not become ready; carries the log tail and matching hints."""

    def __init__(self, message: str, log_tail: str = "", hints: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.hints = hints


class SwapFailed(ComposerError):
    """A swap failed; says whether the previous variant was brought back."""

    def __init__(
        self, message: str, log_tail: str = "", hints: tuple[str, ...] = (), rolled_back: bool = False
    ) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.hints = hints
        self.rolled_back = rolled_back


class LockBusy(ComposerError):
    """Another swap holds the lock and the caller chose not to wait."""


class ImageBuildError(ComposerError):
    """An overlay image could not be validated, built or verified."""


class PreflightFailed(ComposerError):
    """A check before a swap failed; nothing was changed."""
