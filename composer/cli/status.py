"""`status`, `ps`, `ls` (alias `variants`), `history` and `logs`: what runs, its containers, what
could, the project's swaps (newest last) and the logs, followed across swaps."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from composer.cli.base import Context, command
from composer.cli.output import echo_json, note
from composer.cli.params import TailType, complete_from_stack, duration_option, json_option
from composer.errors import ComposerError, UsageError


@command(
    exit_note="1 when the serving variant restarted since its swap, serves with another API key, or runs "
    "while the gateway does not; "
    "130 ends --watch"
)
@json_option("Print JSON (with --watch: one object per change).")
@click.option("-w", "--watch", is_flag=True, help="Refresh until Ctrl-C.")
@duration_option("--interval", "2s", "Time between refreshes with --watch.")
@click.pass_obj
def status(obj: Context, as_json: bool, watch: bool, interval: float) -> int | None:
    """Show the running variant: readiness, served name, port, image, uptime; or why none runs.

    Readiness is the swap gate's own verdict (/health, /v1/models, a 1-token completion);
    Docker's healthcheck is shown only when it disagrees (unhealthy, or healthy while
    the gate fails). A crashed variant is shown with its exit code, when, and its last
    log lines. Exits 1 when Docker restarted the serving variant since its swap, and when a
    variant runs but the gateway does not (Docker's reason is shown). When another
    stack started what runs (its containers' labels name its stack file), status names it;
    with another API key it exits 1 too (this stack's key is refused there: 401).

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
        failed = data.get("restarts_since_swap") or data.get("key_mismatch") or data.get("gateway_down")
        return 1 if failed else None  # restarted, 401, or out of clients' reach
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
    """List every variant: method, K, image, whether the image is here, which ones serve
    (`*`, each member of a live set) and sleep (`z`), its workload classes and its aliases.

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


HEADER = ("TIME", "COMMAND", "FROM", "TO", "OUTCOME", "TOOK", "CUT", "CONTINUED", "REFUSED")


def _outcome(event: dict[str, Any]) -> str:
    """The outcome in words: an interrupted swap says so, a rollback names what serves again."""
    outcome = str(event.get("outcome") or "?")
    cause = str(event.get("cause") or "")
    interrupted = cause == "interrupted" or ": interrupted" in cause
    if outcome == "rolled back":
        back = f"rolled back to {event['source']}" if event.get("source") else "rolled back"
        return f"interrupted, {back}" if interrupted else back
    if event.get("probation"):  # a watcher process watched it after `up` returned: its row follows
        return f"{outcome}, then on probation"
    return "interrupted" if interrupted and outcome == "failed" else outcome


def format_history(events: list[dict[str, Any]]) -> str:
    """A header and aligned columns, one row per event; a failure's cause indented under its row."""
    if not events:
        return "no swaps recorded yet"
    rows = [list(HEADER)]
    for event in events:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(event.get("time", 0))))
        kind = str(event.get("kind") or "up")
        by = event.get("by")
        total = (event.get("timings") or {}).get("total")
        drained = event.get("drained") or {}
        rows.append(
            [
                when,
                f"{kind} ({by})" if by else kind,
                str(event.get("source") or "-"),
                str(event.get("target") or "-"),
                _outcome(event),
                f"{total:.1f}s" if isinstance(total, int | float) else "-",
                *(str(drained.get(name) or "-") for name in ("cut", "continued", "refused")),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = []
    for event, row in zip([{}, *events], rows, strict=True):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if event.get("cause"):
            lines.append(f"  cause: {event['cause']}")
    return "\n".join(lines)


@command()
@click.option("-n", "last", type=click.IntRange(min=1), default=20, show_default=True, help="Events shown.")
@json_option("Print the events as JSON.")
@click.pass_obj
def history(obj: Context, last: int, as_json: bool) -> None:
    """Show the project's swaps: every up, down, wake and rollback, newest last.

    A swap `compose-spec follow` ran says `up (follow)`; an interrupted one says so, with
    the variant its rollback brought back.

    \b
    Examples:
      compose-spec history
      compose-spec history -n 5 --json
    """
    from composer.swap import read_history

    history = read_history(obj.stack().project, last)
    if history.skipped:
        click.echo(f"note: skipped {history.skipped} unreadable line(s) of {history.path}", err=True)
    click.echo(json.dumps(history.events) if as_json else format_history(history.events))


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
