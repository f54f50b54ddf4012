"""The global options: given before the command or anywhere after it, like docker compose's.

Each command carries hidden copies of them (except a name it uses itself, such as `logs -f`);
what they read goes over the values given before the command; `--stack` and `--set` add up.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import click

LATE = "compose_spec.globals"
"""`ctx.meta` key of the global options read after the command name."""


@dataclass(frozen=True)
class GlobalOptions:
    """What the global options say, typed."""

    env_file: str = ".env"
    stacks: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    project_name: str | None = None
    docker_context: str | None = None
    allow_weak_key: bool = False

    def source(self):
        from composer.stack.source import StackSource

        return StackSource(self.stacks, self.env_file, self.sets, self.project_name)


OPTIONS: tuple[click.Option, ...] = (
    click.Option(
        ["--env-file", "env_file"],
        type=click.Path(),
        metavar="FILE",
        help="Env file with host values and VLLM_API_KEY [default: .env].",
    ),
    click.Option(
        ["-f", "--stack", "stacks"],
        multiple=True,
        type=click.Path(),
        metavar="FILE",
        help="Stack file(s), merged in order; replaces the default composer.toml [default: composer.toml].",
    ),
    click.Option(
        ["--set", "sets"],
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a stack value, e.g. --set stack.port=8001.",
    ),
    click.Option(
        ["-p", "--project-name", "project_name"],
        metavar="NAME",
        help="Compose project name (overrides stack.project and COMPOSE_PROJECT_NAME).",
    ),
    click.Option(
        ["--context", "docker_context"],
        metavar="NAME",
        help="Docker context to use (like `docker --context`) [default: DOCKER_HOST, else the current one].",
    ),
    click.Option(
        ["--allow-weak-key"],
        is_flag=True,
        envvar="COMPOSER_ALLOW_WEAK_KEY",
        help="Accept a VLLM_API_KEY estimated under 64 bits of entropy (a warning instead) "
        "[env: COMPOSER_ALLOW_WEAK_KEY=1].",
    ),
)
VALUE_OPTIONS = frozenset(decl for option in OPTIONS if not option.is_flag for decl in option.opts)
"""Global options that take a value (skipped when looking for the command name)."""


def _record_late(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is None or value == () or value is False:  # an absent flag never overrides
        return
    assert param.name is not None
    ctx.meta.setdefault(LATE, {})[param.name] = value


def add_hidden_globals(command: click.Command) -> None:
    """Let the global options stand after the command's name too (hidden in its help)."""
    if any(param.callback is _record_late for param in command.params):
        return  # added under an alias already
    taken = {decl for param in command.params for decl in (*param.opts, *param.secondary_opts)}
    for option in OPTIONS:
        free = [d for d in option.opts if d not in taken]
        if free:
            command.params.append(
                click.Option(
                    [*free, option.name or ""],
                    hidden=True,
                    expose_value=False,
                    callback=_record_late,
                    default=None,
                    type=option.type,
                    multiple=option.multiple,
                    is_flag=option.is_flag,
                    metavar=option.metavar,
                )
            )


def options_of(ctx: click.Context) -> GlobalOptions:
    """The global options in force for the command of `ctx`: those after its name over those
    before it (repeatable ones add up)."""
    names = {f.name for f in fields(GlobalOptions)}
    given = {k: v for k, v in ctx.find_root().params.items() if k in names and v not in (None, "", (), False)}
    for name, value in ctx.meta.get(LATE, {}).items():
        given[name] = (*given.get(name, ()), *value) if isinstance(value, tuple) else value
    return GlobalOptions(**given)
