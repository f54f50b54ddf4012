"""`compose-spec logs`: a variant's or the gateway's log, followed across swaps, or the last failed one."""

from __future__ import annotations

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import note
from composer.cli.params import TailType, complete_from_stack
from composer.errors import UsageError


def _explain(text: str) -> None:
    from composer.swap.service_logs import explanations

    found = explanations(text)
    click.echo("\n".join(found) if found else "no known failure signature in the log")


@command(exit_note="130 ends -f")
@click.argument("service", required=False, shell_complete=complete_from_stack("service"))
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines, across swaps, until Ctrl-C.")
@click.option(
    "-n", "--tail", default="200", show_default=True, type=TailType(), help="Lines to show, or 'all'."
)
@click.option("--since", help="Only lines since a time: 10m, 2h, 90s, or 2024-05-01T10:00:00.")
@click.option("-t", "--timestamps", is_flag=True, help="Prefix each line with its time.")
@click.option("--explain", is_flag=True, help="Explain known failure lines with their fixes.")
@click.option("--failed", is_flag=True, help="The log kept from the last failed swap.")
@click.pass_obj
def logs(
    obj: Context,
    service: str | None,
    follow: bool,
    tail: int | None,
    since: str | None,
    timestamps: bool,
    explain: bool,
    failed: bool,
) -> None:
    """Print a log: the newest variant container's (running or exited), SERVICE's, or the last failed swap's.

    SERVICE is `gateway` or a variant's name (a sleeping one included). With -f it follows
    the variant service across swaps, like `docker compose logs -f`: when the container goes
    away it waits for the next one and goes on. The API key is masked.

    \b
    Examples:
      compose-spec logs -f -n 20
      compose-spec logs gateway --since 10m
      compose-spec logs --failed --explain
    """
    from composer.engine.bootlog import redact
    from composer.swap.logs import parse_since
    from composer.swap.service_logs import check_service, failed_log, failure_note, service_log

    stack = obj.stack()
    check_service(stack, service)
    when = parse_since(since) if since else None
    if failed:
        if follow:
            raise UsageError("--failed reads a saved log: it cannot be combined with -f")
        saved = failed_log(stack, tail)
        click.echo(saved.header, err=True)
        if explain:
            _explain(saved.text)
        else:
            click.echo(saved.text, nl=False)
        return
    if follow and not explain and service is None:
        from composer.swap.logs import follow_service

        for event in follow_service(stack, obj.docker(), tail=tail, since=when, timestamps=timestamps):
            if event.switch:
                click.echo(f"--- {event.text} ---", err=True)
            else:
                click.echo(redact(event.text, stack.api_key), nl=False)
        return
    if follow and not explain:
        from composer.swap.service_logs import service_container

        container = service_container(stack, obj.docker(), service)
        for chunk in container.follow(tail, since=when, timestamps=timestamps):
            click.echo(redact(chunk, stack.api_key), nl=False)
        return
    text = service_log(stack, obj.docker(), service, tail=tail, since=when, timestamps=timestamps)
    if not explain:
        click.echo(text, nl=False)
        return
    _explain(text)
    saved_note = failure_note(stack)
    if saved_note:
        note(saved_note)
