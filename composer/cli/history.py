"""`history`: the project's swaps, newest last."""

from __future__ import annotations

import json

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.params import json_option


@command()
@click.option("-n", "last", type=click.IntRange(min=1), default=20, show_default=True, help="Events shown.")
@json_option("Print the events as JSON.")
@click.pass_obj
def history(obj: Context, last: int, as_json: bool) -> None:
    """Show the project's swaps: every up, down, wake and rollback, newest last.

    \b
    Examples:
      compose-spec history
      compose-spec history -n 5 --json
    """
    from composer.swap import format_history, read_history

    history = read_history(obj.stack().project, last)
    if history.skipped:
        click.echo(f"note: skipped {history.skipped} unreadable line(s) of {history.path}", err=True)
    click.echo(json.dumps(history.events) if as_json else format_history(history.events))
