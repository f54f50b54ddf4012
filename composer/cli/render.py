"""`compose-spec render`: write the compose files and launchers (or Kubernetes manifests)."""

from __future__ import annotations

from pathlib import Path

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import note, shown, warning
from composer.cli.params import complete_from_stack, target_option
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
