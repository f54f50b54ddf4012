"""`compose-spec config`: the resolved stack and where each value came from."""

from __future__ import annotations

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import echo_json
from composer.cli.params import complete_from_stack, json_option


@command("config")
@click.argument("variant", required=False, shell_complete=complete_from_stack("variant"))
@json_option()
@click.pass_obj
def config_cmd(obj: Context, variant: str | None, as_json: bool) -> None:
    """Print the resolved stack and where each value came from (API key masked).

    \b
    Examples:
      compose-spec config
      compose-spec config dflash2 --json --env-file .env.demo
    """
    from composer.render.describe import format_stack, stack_data

    data = stack_data(obj.stack(), variant)
    if as_json:
        echo_json(data)
    else:
        click.echo(format_stack(data))
