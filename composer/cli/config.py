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
@click.option(
    "--keys", is_flag=True, help="List every settable key, its kind and what it does; read no stack."
)
@click.option("--schema", is_flag=True, help="Print the JSON Schema of composer.toml; read no stack.")
@click.pass_obj
def config_cmd(obj: Context, variant: str | None, as_json: bool, keys: bool, schema: bool) -> None:
    """Print every setting of the resolved stack: its value as written, where it came from
    and what it does (API key masked).

    Every key of every table is listed ([stack], [gateway], [kubernetes], [images], each
    variant), defaults included; sizes and durations keep their units (7.0GiB, 15m).

    \b
    Examples:
      compose-spec config
      compose-spec config dflash2 --json --env-file .env.demo
      compose-spec config --keys
      compose-spec config --schema > schema/composer.schema.json
    """
    from composer.render.describe import format_keys, format_stack, stack_data

    if schema:
        from composer.stack.schema import json_schema

        echo_json(json_schema())
        return
    if keys:
        from composer.stack.settings import KEYS

        if as_json:
            echo_json(
                [
                    {
                        "key": k.dotted,
                        "kind": k.kind,
                        "choices": list(k.choices),
                        "description": k.description,
                    }
                    for k in KEYS
                ]
            )
        else:
            click.echo(format_keys())
        return

    data = stack_data(obj.stack(), variant)
    if as_json:
        echo_json(data)
    else:
        click.echo(format_stack(data))
