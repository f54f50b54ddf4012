"""`compose-spec doctor`: check the host, Docker, GPUs, checkpoints and secrets."""

from __future__ import annotations

import contextlib

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import echo_json
from composer.cli.params import complete_from_stack, json_option


@command(exit_note="1 when any check fails")
@click.argument("variant", required=False, shell_complete=complete_from_stack("variant"))
@json_option("Print the report as JSON (schema 1).")
@click.pass_obj
def doctor(obj: Context, variant: str | None, as_json: bool) -> None:
    """Check the host, Docker, GPUs, checkpoints and secrets for VARIANT (all by default).

    Then print the capacity figures `up` uses: per GPU weights, KV cache, activations,
    release budget and sleep residue, and the host RAM sleeping variants hold.

    \b
    Examples:
      compose-spec doctor
      compose-spec doctor dflash2 --json --env-file .env.demo
    """
    from composer.doctor.report import default_host, format_report, run_doctor
    from composer.doctor.switch_checks import switching_configured
    from composer.errors import ChecksFailed
    from composer.swap.status import follower_attached

    stack = obj.stack()
    follower = None  # what the running gateway says about `compose-spec follow` (None: not asked)
    if switching_configured(stack) is not None:
        with contextlib.suppress(
            Exception
        ):  # no engine, no gateway, the SDK's errors: doctor reports the engine
            follower = follower_attached(stack, obj.docker())
    report = run_doctor(
        stack,
        variant,
        default_host(obj.options.env_file),
        allow_weak_key=obj.options.allow_weak_key,
        follower_attached=follower,
    )
    failed = [c for c in report.checks if c.failed]
    if not as_json:
        click.echo(format_report(report))
    elif not failed:
        echo_json(report.to_json())
    if failed:  # with --json, the report goes into the error object
        err = ChecksFailed(
            f"{len(failed)} check(s) failed: " + ", ".join(dict.fromkeys(c.name for c in failed))
        )
        err.details.update(report.to_json())
        raise err
