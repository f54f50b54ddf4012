"""`bench` and `recommend`: warm decode speed, acceptance and correctness per variant and K, and
the variant and K that won each workload, as a [workloads] table."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import click

from composer.cli.base import Context, command, require_api_key
from composer.cli.output import LiveLine, echo_json
from composer.cli.params import csv_list, duration_option, json_option
from composer.errors import ComposerError, Interrupted, UsageError


@command(exit_note="1 when a point failed (named); 130 after writing what was measured")
@click.option("--variants", help="Comma-separated variants to measure [default: all in the stack].")
@click.option("--k", "ks", help="Comma-separated K values for speculative variants [default: 1,3,4,7,10].")
@click.option("--prompt-file", type=click.Path(dir_okay=False), help="Prompts separated by lines of `---`.")
@click.option(
    "--prompt-tokens",
    help="Comma-separated prompt lengths: pad the built-in prompts to about N tokens (e.g. 128,2000,16000).",
)
@click.option(
    "--concurrency",
    help="Comma-separated numbers of concurrent streams per point (e.g. 1,4,16) [default: 1].",
)
@click.option("--max-tokens", default=512, show_default=True, help="Tokens generated per request.")
@click.option("--runs", default=5, show_default=True, help="Measured requests per point and stream.")
@click.option("--warmup", default=1, show_default=True, help="Uncounted warm-up requests per point.")
@click.option(
    "--out",
    "out_dir",
    default="bench-results",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where bench.json, bench.csv and bench.png go.",
)
@json_option("Print the report as JSON instead of a table.")
@duration_option("--timeout", "15m", "Time per swap and per request.")
@click.option("--decide", is_flag=True, help="Switch or adapt: every arm over 1-32 streams, then a decision.")
@click.pass_obj
def bench(
    obj: Context,
    variants: str | None,
    ks: str | None,
    prompt_file: str | None,
    prompt_tokens: str | None,
    concurrency: str | None,
    out_dir: Path,
    as_json: bool,
    timeout: float,
    decide: bool,
    **measure: int,
) -> None:
    """Measure warm decode speed, acceptance and correctness per variant and K; restore after.

    Ctrl-C stops the sweep, brings back the variant that served before (once) and
    writes the points measured so far.

    --decide measures every arm (plain, best static MTP K, the in-server adaptive
    variants) over 1-32 streams and 128/2000-token prompts, then replays a phase-changing
    trace through the gateway with its automatic policy switching between the plain
    variant and the best speculative arm, and ends with a decision (decide.json, decide.png).

    \b
    Examples:
      compose-spec bench --variants baseline,mtp --k 1,3,7 --runs 5
      compose-spec bench --variants mtp --prompt-tokens 2000 --json --out results/
      compose-spec bench --variants baseline,mtp --k 7 --concurrency 1,4,16 --prompt-tokens 128,2000,16000
      compose-spec bench --decide
      compose-spec bench --decide --variants baseline,mtp,mtp-adaptive --k 7 --runs 3
    """
    from composer.bench import decide as arms
    from composer.bench.prompts import BUILTIN_PROMPTS, read_prompt_file
    from composer.bench.report import format_table, report_data, write_outputs
    from composer.bench.swaps import bench_with_swaps
    from composer.bench.sweep import BenchOptions
    from composer.bench.switch_run import SwitchRun
    from composer.errors import BenchError

    lengths = csv_list(prompt_tokens, int)
    streams = csv_list(concurrency, int)
    if decide:  # it brings its own streams and prompt lengths unless given
        streams = arms.DECIDE_CONCURRENCY if streams is None else streams
        lengths = arms.DECIDE_PROMPT_TOKENS if lengths is None and not prompt_file else lengths
    if prompt_file is not None and lengths is not None:
        raise UsageError("give either --prompt-file or --prompt-tokens, not both")
    options = BenchOptions(
        prompts=BUILTIN_PROMPTS if prompt_file is None else read_prompt_file(prompt_file),
        request_timeout=timeout,
        concurrency=streams or (1,),
        prompt_tokens=lengths or (None,),
        **measure,
    )
    stack = obj.stack()
    k_values = csv_list(ks, int)
    plan = arms.plan_arms(stack, arms.image_present, k_values) if decide else None
    names = csv_list(variants) or (
        plan.variants if plan else tuple(n for n, v in stack.variants.items() if not v.refused)
    )
    for name in names:
        stack.startable(name)
    allow_weak = obj.options.allow_weak_key
    require_api_key(stack, allow_weak)
    from composer.swap.journal import first_time

    line = LiveLine(partial(first_time, stack.project))  # its swaps' warnings: once per stack
    swapping: dict[str, Any] = {"swap_timeout": timeout, "allow_weak_key": allow_weak}
    swapping |= {"progress": line.step, "waiting": line.waiting}
    switching = SwitchRun(("", ""), {})
    after_sweep = partial(_measure_switching, obj, plan, options, switching, line, swapping) if plan else None
    try:
        report = bench_with_swaps(
            obj.source.load,
            names,
            k_values,
            options,
            client=obj.docker(),
            **swapping,
            ks_by_variant=plan.ks_by_variant if plan else None,
            after_sweep=after_sweep,
        )
    finally:
        line.finish()
    written = write_outputs(report, out_dir)
    data = report_data(report)
    decision = None
    if plan is not None and report.measured():
        measured = switching.data() if switching.requests else None
        decision = arms.decide(data, plan, measured)
        written += arms.write_decision(decision, out_dir)
        data["decide"] = arms.decision_data(decision) | {"notes": list(plan.notes)}
    click.echo("wrote: " + ", ".join(str(p) for p in written), err=True)
    failed = report.failed_points()
    error: ComposerError | None = None
    if report.interrupted:
        error = Interrupted(
            f"{report.interrupted}: wrote the {len(report.measured())} point(s) measured so far"
        )
    elif failed:
        error = BenchError(
            f"{len(failed)} point(s) failed: " + "; ".join(f"{r.point.label}: {r.error}" for r in failed)
        )
    if error is None or not as_json:
        click.echo(json.dumps(data, indent=2) if as_json else format_table(report))
        if decision is not None and plan is not None and not as_json:
            click.echo("\n" + arms.format_decision(decision))
            for note in plan.notes:
                click.echo(f"note: {note}")
    if error is not None:
        error.details.update(data)
        raise error


def _measure_switching(obj: Context, plan, options, run, line: LiveLine, swapping: dict, report) -> None:
    """The switching arm: the trace through the gateway with the automatic policy between
    the plain variant and the best speculative arm (fills `run`; Ctrl-C keeps what finished)."""
    from composer.bench import decide as arms
    from composer.bench.report import report_data
    from composer.bench.sweep import BenchPoint, k_override
    from composer.bench.switch_run import policy_workloads, run_switching, switching_stack

    data = report_data(report)
    try:
        planned = arms.decide(data, plan)
    except ValueError:
        return
    if planned.switch_arms is None:
        report.notes.append("no switching arm: it needs the plain variant and a speculative arm on the trace")
        return
    plain, spec = planned.switch_arms
    variant, _, k = spec.partition(" K=")
    flags = k_override(BenchPoint(variant, "", int(k))) if k else ()
    names = {plain: plain, spec: variant}
    cells = planned.arms

    def rate(arm: str, cell) -> float | None:
        stats = cells.get(arm, {}).get(cell)
        return stats.aggregate_tok_s if stats else None

    workloads = policy_workloads(planned.phases, rate, (plain, spec), names)
    run.arms, run.workloads = (plain, spec), workloads
    line.step(f"switching: {plain} <-> {spec} by the automatic policy over the trace")
    try:
        run_switching(
            switching_stack(obj.source.load(flags), workloads),
            variant,
            planned.phases,
            options,
            run,
            client=obj.docker(),
            **swapping,
        )
    except KeyboardInterrupt:
        report.interrupted = "interrupted"


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
