"""The gateway's exceptions (standard library only, so the image needs nothing else)."""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every gateway error reported to a user (exit code 1)."""

    exit_code = 1


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
