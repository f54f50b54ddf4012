"""`compose-spec build`: an overlay image, built offline."""

from __future__ import annotations

from pathlib import Path

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.params import complete_recipe


@command("build")
@click.argument("recipe", shell_complete=complete_recipe)
@click.option("--dry-run", is_flag=True, help="Validate and apply the diffs against the base; build nothing.")
@click.option(
    "--pin",
    is_flag=True,
    help="Record the diffs' current sha256 in image.toml, then build (--dry-run: show it).",
)
@click.option("--force", is_flag=True, help="Rebuild even when the image already records the same inputs.")
@click.option(
    "--verify",
    "verify_cmd",
    metavar="CMD",
    help="Run CMD (a shell-quoted command line) offline in the image instead of the recipe's verify.command; "
    "the modules the diffs add are imported either way.",
)
@click.option(
    "--use-base",
    is_flag=True,
    help="When the base image already contains the change (the diffs apply in reverse), "
    "tag the base itself as the image, labelled as such, instead of failing.",
)
@click.option(
    "--recipes-dir",
    default="images",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    hidden=True,
    is_eager=True,
)
@click.pass_obj
def build_cmd(obj: Context, recipe: str, verify_cmd: str | None, recipes_dir: Path, **flags: bool) -> None:
    """Build the overlay image of images/RECIPE offline (base must be local; never pulls).

    \b
    Examples:
      compose-spec build dflash2 --dry-run
      compose-spec build dflash2 --env-file .env.demo
      compose-spec build dflash2 --use-base   # a base that already contains the change
    """
    from composer.overlay.builder import build_overlay
    from composer.overlay.recipe import load_recipe, verify_argv

    verify = verify_argv(verify_cmd) if verify_cmd is not None else None
    loaded = load_recipe(recipes_dir, recipe, obj.stack().images)

    def say(line: str) -> None:
        click.echo(f"build {recipe}: {line}")

    result = build_overlay(obj.docker(), loaded, progress=say, verify=verify, **flags)
    summary = {"built": "built", "current": "up to date", "dry-run": "dry run passed, nothing built"}
    click.echo(f"{result.tag}: {summary[result.status]}")
