"""The `compose-spec` command line: the group and its table of commands here, one module per
family of commands.

Owns: parsing the command line (click), the global options wherever they stand (`globals`),
printing, the one error handler (one line on stderr; exit 2 for usage and configuration
errors, 1 for failures, 130 when interrupted), the one stop-signal handler and one Docker
client per command (`base`). The only part of the package that imports click or
prints; commands call domain code and print what it returns.
May import: every other part of `composer`. Nothing imports it.
Public: `main` (the `compose-spec` group), `ComposeSpecGroup`, `LiveLine`.
"""

from __future__ import annotations

import click

from composer.cli import bench, doctor, down, follow, init, render, status, swap
from composer.cli.base import ComposeSpecGroup, Context
from composer.cli.globals import OPTIONS
from composer.cli.output import LiveLine

__all__ = ["ComposeSpecGroup", "LiveLine", "main"]


@click.group(
    name="compose-spec",
    cls=ComposeSpecGroup,
    params=list(OPTIONS),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="vllm-variant-composer")
@click.pass_context
def main(ctx: click.Context, **_: object) -> None:
    """Render, build, swap and benchmark vLLM containers behind one port and one served name.

    \b
    Examples:
      compose-spec up mtp --env-file .env.demo
      compose-spec status --watch
      compose-spec -f other.toml -p test ps

    \b
    Shell completion (bash; zsh and fish alike):
      eval "$(_COMPOSE_SPEC_COMPLETE=bash_source compose-spec)"
    """
    ctx.obj = Context()


COMMANDS: tuple[tuple[click.Command, tuple[str, ...]], ...] = (
    (render.render, ()),
    (init.init_cmd, ()),
    (init.config_cmd, ()),
    (swap.up, ()),
    (swap.use, ()),
    (follow.follow, ()),
    (down.down, ()),
    (down.restart, ()),
    (status.status, ()),
    (status.ps, ()),
    (status.history, ()),
    (status.ls_cmd, ("variants",)),
    (status.logs, ()),
    (render.build_cmd, ()),
    (doctor.doctor, ()),
    (bench.bench, ()),
    (bench.recommend, ()),
    (doctor.version, ()),
)
for _command, _aliases in COMMANDS:
    main.add_command(_command)
    for _alias in _aliases:
        main.add_command(_command, _alias)
