"""`doctor` and `version`: check the host, Docker, GPUs, checkpoints and secrets; the tool's
version and the images the stack would run."""

from __future__ import annotations

import contextlib

import click

from composer.cli.base import Context, command
from composer.cli.output import echo_json
from composer.cli.params import complete_from_stack, json_option
from composer.errors import ComposerError


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


def tool_version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm-variant-composer")
    except PackageNotFoundError:
        from composer import __version__

        return __version__


@command()
@click.option(
    "--probe", is_flag=True, help="Run `vllm --version` offline in each vLLM image that has no version label."
)
@json_option()
@click.pass_obj
def version(obj: Context, probe: bool, as_json: bool) -> None:
    """Print compose-spec's version and the gateway and vLLM images the stack would use.

    Each image is shown with whether it is present on the engine, its id and, when the
    image records it, the vLLM version.

    \b
    Examples:
      compose-spec version
      compose-spec version --probe --json
    """
    from composer.engine.images import stack_images

    stack = obj.stack()
    client = None
    engine_note = ""
    try:
        client = obj.docker(timeout=10)
    except ComposerError as err:
        engine_note = str(err)
    images = stack_images(stack, client, probe=probe)
    if as_json:
        data = {"compose_spec": tool_version(), "images": [i.to_json() for i in images]}
        data["engine_error"] = engine_note or None
        echo_json(data)
        return
    click.echo(f"compose-spec {tool_version()}")
    for image in images:
        here = {True: "present", False: "not present", None: "unknown (no engine)"}[image.present]
        details = ", ".join(filter(None, (image.image_id, f"vLLM {image.version}" if image.version else "")))
        used = "" if image.role == "gateway" else f" (variants: {', '.join(image.used_by)})"
        click.echo(f"{image.role} image {image.ref}: {here}{' [' + details + ']' if details else ''}{used}")
    if engine_note:
        click.echo(f"note: {engine_note}", err=True)
    missing = [i for i in images if i.present is False]
    for image in missing:
        click.echo(f"note: {image.ref} is not here: pull or load it, or build it", err=True)
