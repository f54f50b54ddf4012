"""The command classes and what every command is handed: help that ends with exit codes,
close-match suggestions, global options anywhere on the line, `ComposeSpecGroup.main`, the one
place errors become one line on stderr and an exit code (2 usage or configuration, 1 failure,
130 interrupted; a command run with `--json` that fails prints one `{"error", "kind",
"exit_code", ...}` object), and `Context`: the global options, the stack they name, one Docker
client per command.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from composer.cli.globals import VALUE_OPTIONS, GlobalOptions, add_hidden_globals, options_of
from composer.errors import (
    DISK_FULL,
    ComposerError,
    ConfigError,
    DiagnosedError,
    Interrupted,
    cannot_write,
    did_you_mean,
)
from composer.signals import interrupts

EXIT_CODES = "0 success, 1 failure, 2 usage or configuration error, 130 interrupted (Ctrl-C)"
DEBUG_VAR = "COMPOSE_SPEC_DEBUG"
GLOBALS_NOTE = (
    "Global options (--env-file, -f/--stack, --set, -p/--project-name, --context) may also "
    "follow the command."
)


def one_line(text: str) -> str:
    """`text` with every character that would break its line (or not print) escaped."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _exit_code(err: ComposerError) -> int:
    """The error's exit code; 130 when it was caused by an interrupt."""
    return 130 if isinstance(err.__cause__, KeyboardInterrupt) else err.exit_code


def error_object(err: ComposerError) -> dict[str, Any]:
    """The `--json` form of a failure."""
    data: dict[str, Any] = {"error": str(err), "kind": err.kind, "exit_code": _exit_code(err)}
    if isinstance(err, DiagnosedError):
        data |= {"hints": list(err.hints), "log_tail": err.log_tail}
    data.update(err.details)
    if _exit_code(err) == 130:
        data["kind"] = Interrupted.kind
    return data


class ComposeSpecCommand(click.Command):
    """A command whose help ends with its exit codes (and `exit_note`, when it has one)."""

    def __init__(self, *args: Any, exit_note: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_note = exit_note

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        formatter.write_paragraph()
        formatter.write_text(GLOBALS_NOTE)
        formatter.write_paragraph()
        note = f"; {self.exit_note}" if self.exit_note else ""
        formatter.write_text(f"Exit codes: {EXIT_CODES}{note}.")

    def invoke(self, ctx: click.Context) -> Any:
        obj = ctx.find_object(Context)
        if obj is not None:
            obj.bind(ctx)
        return super().invoke(ctx)


class ComposeSpecGroup(click.Group):
    """The command group: central error handling and close-match suggestions."""

    command_class = ComposeSpecCommand

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        add_hidden_globals(cmd)
        super().add_command(cmd, name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:  # bare `compose-spec`: its help, exit 0
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, ...]:
        name = args[0] if args else ""
        unknown = name and not name.startswith("-") and self.get_command(ctx, name) is None
        if unknown and not ctx.resilient_parsing:
            hint = did_you_mean(name, self.list_commands(ctx))
            raise click.UsageError(f"No such command {name!r}{':' + hint if hint else '.'}", ctx)
        return super().resolve_command(ctx, args)

    def wants_json(self, argv: Sequence[str]) -> bool:
        """True when `--json` was given to a command that has it (found past the global
        options and their values)."""
        words = iter(argv)
        for word in words:
            if word in VALUE_OPTIONS:
                next(words, None)
            elif not word.startswith("-"):
                command = self.commands.get(word)
                supports = command is not None and any(p.name == "as_json" for p in command.params)
                return supports and "--json" in argv
        return False

    def main(self, args: Sequence[str] | None = None, *posargs: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        argv = list(sys.argv[1:] if args is None else args)
        kwargs["standalone_mode"] = False
        as_json = self.wants_json(argv)
        try:
            with interrupts():
                result = super().main(argv, *posargs, **kwargs)
        except (KeyboardInterrupt, click.exceptions.Abort):
            self._exit(Interrupted("interrupted"), as_json, quiet=True)
        except click.ClickException as err:
            if as_json:
                click.echo(
                    json.dumps({"error": err.format_message(), "kind": "usage", "exit_code": err.exit_code})
                )
            err.show()
            sys.exit(err.exit_code)
        except ComposerError as err:
            self._exit(err, as_json)
        except Exception as err:
            if isinstance(err, OSError) and err.errno in DISK_FULL:  # no room to write: not a bug
                self._exit(ComposerError(cannot_write(err.filename, err)), as_json)
            if os.environ.get(DEBUG_VAR):
                raise
            wrapped = ComposerError(
                f"internal error: {err or 'no message'} "
                f"(a bug: set {DEBUG_VAR}=1 to see the traceback, and report it)"
            )
            wrapped.kind = "internal"
            self._exit(wrapped, as_json)
        sys.exit(result if isinstance(result, int) else 0)

    @staticmethod
    def _exit(err: ComposerError, as_json: bool, quiet: bool = False) -> None:
        if isinstance(err, DiagnosedError) and _exit_code(err) != 130:  # interrupted: no failure to explain
            if err.log_tail and not err.tail_shown:  # a swap shows it before rolling back
                click.echo(err.log_tail.rstrip(), err=True)
            for hint in err.hints:
                click.echo(f"hint: {hint}", err=True)
        if as_json:
            click.echo(json.dumps(error_object(err)))
        if not quiet:
            text = str(err)
            if _exit_code(err) == 2:  # usage and configuration errors are one line, whatever they quote
                text = one_line(text)
            click.echo(f"compose-spec: error: {text}", err=True)
        sys.exit(_exit_code(err))


def command(*args: Any, **kwargs: Any) -> Any:
    """`click.command` making a ComposeSpecCommand (help with exit codes, global options)."""
    return click.command(*args, cls=ComposeSpecCommand, **kwargs)


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
