"""`compose-spec version`: the tool's version and the images the stack would run."""

from __future__ import annotations

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import echo_json
from composer.cli.params import json_option
from composer.errors import ComposerError


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
