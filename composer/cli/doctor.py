"""`compose-spec doctor`: check the host, Docker, GPUs, checkpoints and secrets."""

from __future__ import annotations

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

    \b
    Examples:
      compose-spec doctor
      compose-spec doctor dflash2 --json --env-file .env.demo
    """
    from composer.doctor.report import default_host, format_report, run_doctor
    from composer.errors import ChecksFailed

    report = run_doctor(obj.stack(), variant, default_host(obj.env_file), allow_weak_key=obj.allow_weak_key)
    failed = [c for c in report.checks if c.failed]
    if failed:
        err = ChecksFailed(
            f"{len(failed)} check(s) failed: " + ", ".join(dict.fromkeys(c.name for c in failed))
        )
        if as_json:
            err.details.update(report.to_json())
        else:
            click.echo(format_report(report))
        raise err
    if as_json:
        echo_json(report.to_json())
    else:
        click.echo(format_report(report))
