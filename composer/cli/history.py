"""`history`: the project's swaps, newest last, as a table."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.params import json_option

HEADER = ("TIME", "COMMAND", "FROM", "TO", "OUTCOME", "TOOK", "CUT", "CONTINUED", "REFUSED")


def _outcome(event: dict[str, Any]) -> str:
    """The outcome in words: an interrupted swap says so, a rollback names what serves again."""
    outcome = str(event.get("outcome") or "?")
    cause = str(event.get("cause") or "")
    interrupted = cause == "interrupted" or ": interrupted" in cause
    if outcome == "rolled back":
        back = f"rolled back to {event['source']}" if event.get("source") else "rolled back"
        return f"interrupted, {back}" if interrupted else back
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
