"""`status`, `ps` and `ls` (alias `variants`): what runs, its containers, and what could."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import echo_json, note
from composer.cli.params import duration_option, json_option
from composer.errors import ComposerError


@command(exit_note="1 when the serving variant restarted since its swap; 130 ends --watch")
@json_option("Print JSON (with --watch: one object per change).")
@click.option("-w", "--watch", is_flag=True, help="Refresh until Ctrl-C.")
@duration_option("--interval", "2s", "Time between refreshes with --watch.")
@click.pass_obj
def status(obj: Context, as_json: bool, watch: bool, interval: float) -> int | None:
    """Show the running variant: readiness, served name, port, image, uptime; or why none runs.

    Readiness is the swap gate's own verdict (/health, /v1/models, a 1-token completion);
    Docker's healthcheck is shown only when it disagrees (unhealthy, or healthy while
    the gate fails). A crashed variant is shown with its exit code, when, and its last
    log lines. Exits 1 when Docker restarted the serving variant since its swap.

    \b
    Examples:
      compose-spec status
      compose-spec status --watch --interval 1s
    """
    from composer.swap.status import format_status, status_data, without_clock

    stack = obj.stack()
    client = obj.docker()

    def show(data: dict[str, Any]) -> str:
        return json.dumps(data, indent=None if watch else 2) if as_json else format_status(data)

    if not watch:
        data = status_data(stack, client)
        click.echo(show(data))
        return 1 if data.get("restarts_since_swap") else None  # restarted since its swap
    tty = sys.stdout.isatty()
    last: dict[str, Any] | None = None
    while True:
        data = status_data(stack, client)
        if tty:
            click.clear()
            click.echo(f"every {interval:g}s; Ctrl-C to stop\n\n{show(data)}")
        elif without_clock(data) != last:
            click.echo(show(data) + ("" if as_json else "\n"))
            last = without_clock(data)
        time.sleep(interval)


@command()
@json_option()
@click.pass_obj
def ps(obj: Context, as_json: bool) -> None:
    """List the project's containers: each variant (serving, asleep, awake, or Docker's
    state), the gateway and the optional services, with the host ports each publishes.

    \b
    Examples:
      compose-spec ps
      compose-spec -p demo ps --json
    """
    from composer.swap.ps import format_ps, ps_data

    stack = obj.stack()
    rows = ps_data(stack, obj.docker())
    if as_json:
        echo_json(rows)
    else:
        click.echo(format_ps(rows, stack.project))


@command("ls")
@json_option()
@click.pass_obj
def ls_cmd(obj: Context, as_json: bool) -> None:
    """List every variant: method, K, image, whether the image is here, which one serves,
    its workload classes and its aliases.

    \b
    Examples:
      compose-spec ls
      compose-spec variants --json
    """
    from composer.swap.status import format_variants, variants_data

    stack = obj.stack()
    client = None
    try:
        client = obj.docker(timeout=10)
    except ComposerError as err:
        note(f"{err} (image presence and the serving variant are unknown)")
    rows = variants_data(stack, client)
    if as_json:
        echo_json(rows)
    else:
        click.echo(format_variants(rows))
