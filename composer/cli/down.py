"""`down`: take the stack down (its variants, sleeping ones, the live set and the gateway), or one variant."""

from __future__ import annotations

import click

from composer.cli.base import command
from composer.cli.context import Context
from composer.cli.output import LiveLine, note
from composer.cli.params import complete_from_stack


@command()
@click.argument("variant", required=False, shell_complete=complete_from_stack("variant"))
@click.option("--force", is_flag=True, help="Stop VARIANT even when it serves while others sleep.")
@click.option(
    "-v",
    "--volumes",
    is_flag=True,
    help="Also remove the project's named volumes (the gateway's state: its switch history).",
)
@click.pass_obj
def down(obj: Context, variant: str | None, force: bool, volumes: bool) -> None:
    """Stop and remove the running variant, sleeping ones and the gateway too.

    The project's volume (the gateway's state) stays, as with docker compose, unless
    --volumes. With VARIANT: stop only that variant's container. A sleeping one is always
    stopped; the serving one is refused while others sleep (nothing would serve) unless
    --force; the only variant running takes the whole project down, like `down`.

    \b
    Examples:
      compose-spec down
      compose-spec down mtp
      compose-spec -p demo down --volumes
    """
    from composer.errors import UsageError
    from composer.swap.down import down as stop
    from composer.swap.down import down_variant, kept_volumes

    line = LiveLine()
    stack = obj.stack()
    if variant is not None:
        if volumes:
            raise UsageError("--volumes removes the project's volumes: give it without VARIANT")
        stack.variant(variant)  # an unknown name: exit 2 with the known ones
        said = down_variant(stack, variant, client=obj.docker(), force=force, progress=line.step)
        line.finish()
        click.echo(said)
        return
    stopped = stop(stack, client=obj.docker(), progress=line.step, volumes=volumes)
    line.finish()
    click.echo(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")
    kept = None if volumes else kept_volumes(stack, obj.docker())
    if kept:
        note(kept)
