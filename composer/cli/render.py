"""`render` and `build`: write the compose files and launchers (or Kubernetes manifests), or
build an overlay image offline."""

from __future__ import annotations

from pathlib import Path

import click

from composer.cli.base import Context, command
from composer.cli.output import note, warning
from composer.cli.params import complete_from_stack, complete_recipe, target_option
from composer.errors import ComposerError


@command(exit_note="with --check, 1 when a file is stale")
@click.argument("variants", nargs=-1, shell_complete=complete_from_stack("variant"))
@click.option("--check", is_flag=True, help="Write nothing; exit 1 listing files that are stale.")
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for a local render with env-file and --set values "
    "[default: compose/ (or kubernetes/) next to the stack file].",
)
@target_option
@click.pass_obj
def render(obj: Context, variants: tuple[str, ...], check: bool, out_dir: Path | None, target: str) -> None:
    """Write compose/<variant>.yml and compose/<variant>.sh for each variant (all by default).

    The committed compose/ folder next to the stack file is rendered from the stack
    files alone: the env file, the environment and --set never reach it. A local render
    with those values goes to --out DIR. With --target kubernetes: kubernetes/base and
    kubernetes/overlays/<variant> (kustomize).

    \b
    Examples:
      compose-spec render                      # the committed compose/ files
      compose-spec render mtp --env-file .env --out /tmp/local
      compose-spec render --target kubernetes
    """
    from composer.render.files import write_all
    from composer.render.outputs import render_plan, stale_files
    from composer.render.outputs import shown_path as shown

    plan = render_plan(
        obj.stack(), obj.source.load_alone, target, variants, out_dir, has_flags=bool(obj.options.sets)
    )
    if plan.local_values_left_out:
        note(
            f"values from {obj.options.env_file} and the environment are not written into "
            f"{shown(plan.folder)}/ (rendered from the stack files alone): use --out DIR for a local render"
        )
    for text in plan.refused:
        warning(text)
    if check:
        stale = stale_files(plan.files)
        for file in stale:
            click.echo(f"stale: {shown(file.path)}")
        if stale:
            again = "" if target == "compose" else f" --target {target}"
            raise ComposerError(f"{len(stale)} rendered file(s) are stale: run `compose-spec render{again}`")
        click.echo(f"{len(plan.files)} rendered file(s) are current")
        return
    for file, written in zip(plan.files, write_all(plan.files), strict=True):
        click.echo(f"{'wrote' if written else 'unchanged'}: {shown(file.path)}")


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
