"""`compose-spec init`: a starter stack in a folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from composer.cli.base import command
from composer.cli.output import shown


@dataclass(frozen=True)
class InitArgs:
    directory: Path
    with_env: bool
    force: bool


@command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--env", "with_env", is_flag=True, help="Also write .env with a generated API key (mode 0600).")
@click.option("--force", is_flag=True, help="Overwrite existing starter files (never .env).")
def init_cmd(**kwargs: object) -> None:
    """Write a starter composer.toml and .env.example into DIRECTORY (default: here).

    \b
    Examples:
      compose-spec init my-stack --env && cd my-stack && compose-spec render
      compose-spec init --force
    """
    from composer.stack.starter import init_stack

    args = InitArgs(**kwargs)  # type: ignore[arg-type]
    for written in init_stack(args.directory, with_env=args.with_env, force=args.force):
        click.echo(f"wrote: {shown(written.path)}")
    click.echo("next: edit composer.toml and .env, then `compose-spec render` and `compose-spec doctor`")
