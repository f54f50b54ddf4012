"""The `compose-spec` group: the global options and the table of commands."""

from __future__ import annotations

import click

from composer.cli import bench, doctor, follow, init, logs, render, status, swap
from composer.cli.base import ComposeSpecGroup
from composer.cli.context import Context
from composer.cli.globals import OPTIONS


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
    (swap.down, ()),
    (status.status, ()),
    (status.ps, ()),
    (status.history, ()),
    (status.ls_cmd, ("variants",)),
    (logs.logs, ()),
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
