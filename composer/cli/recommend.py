"""`compose-spec recommend`: the variant and K that won each workload, as a [workloads] table."""

from __future__ import annotations

from pathlib import Path

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import echo_json
from composer.cli.params import json_option


@command()
@click.option(
    "--from",
    "source",
    default="bench-results",
    show_default=True,
    type=click.Path(path_type=Path),
    help="The folder `bench --out` wrote (its bench.json), or the JSON file itself.",
)
@click.option(
    "--write", is_flag=True, help="Write the proposed keys into the stack file's [workloads] table."
)
@json_option("Print the winners and the block as JSON.")
@click.pass_obj
def recommend(obj: Context, source: Path, write: bool, as_json: bool) -> None:
    """Name the variant and K that won each workload (prompt length x streams) and propose [workloads].

    Classes: chat (prompts up to 512 tokens, or as given), medium (up to 4096), long
    (longer), each followed by the number of streams: chat-1, long-16. The winner has the
    highest aggregate tok/s. --write keeps every other line of the first stack file,
    comments included, and checks that the stack still loads.

    \b
    Examples:
      compose-spec recommend --from bench-results
      compose-spec recommend --from results/bench.json
      compose-spec recommend --write
    """
    from composer.bench.recommend import (
        check_against_stack,
        format_wins,
        read_bench,
        winners,
        workloads_block,
        write_workloads,
    )

    stack = obj.stack()
    wins = winners(read_bench(source))
    notes = check_against_stack(wins, stack)
    written = None
    if write:
        written = obj.source.first_file()
        write_workloads(written, wins)
        obj.stack()  # the written table must load
        notes.append(f"wrote {len(wins)} workload(s) into [workloads] of {written}")
    block = workloads_block(wins)
    if as_json:
        data = {"workloads": [w.to_json() for w in wins], "block": block, "notes": notes}
        data["written"] = str(written) if written else None
        echo_json(data)
        return
    click.echo(format_wins(wins))
    click.echo("\nproposed:\n" + block.rstrip("\n"))
    for text in notes:
        click.echo(f"note: {text}")
