"""What every command is handed: the global options, the stack they name, one Docker client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from composer.cli.globals import GlobalOptions, options_of
from composer.errors import ConfigError

if TYPE_CHECKING:
    import docker

    from composer.stack.model import Stack
    from composer.stack.source import StackSource


class Context:
    """The global options of the running command, the stack source they name, and the
    command's one Docker client (opened on first use, closed when the command ends)."""

    def __init__(self) -> None:
        self.options = GlobalOptions()
        self._client: docker.DockerClient | None = None

    def bind(self, ctx: click.Context) -> None:
        """Take the global options in force for this command; point the engine at --context."""
        from composer.engine.client import select_context

        self.options = options_of(ctx)
        select_context(self.options.docker_context)
        ctx.call_on_close(self.close)

    @property
    def source(self) -> StackSource:
        return self.options.source()

    def stack(self) -> Stack:
        return self.source.load()

    def docker(self, timeout: int | None = None) -> docker.DockerClient:
        """The command's Docker client (one per command; closed when the command ends)."""
        if self._client is None:
            from composer.engine import client as engine_client

            self._client = engine_client.docker_client(timeout) if timeout else engine_client.docker_client()
        return self._client

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


def require_api_key(stack: Any, allow_weak: bool = False) -> None:
    """Commands that serve with the key need it, hard to guess: else a configuration error."""
    from composer.stack.keys import require_strong_key

    if not stack.api_key:
        raise ConfigError(
            "VLLM_API_KEY is not set: put it in the env file (--env-file, default .env) or the "
            "environment (see .env.example)"
        )
    require_strong_key(stack.api_key, allow_weak)
