"""`down` and `restart`, as compose users type them: take the stack (or one variant) down after
draining what is in flight, or restart what serves through `up`'s health gate."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from typing import Any

import click

from composer.cli.base import Context, command
from composer.cli.output import LiveLine, note
from composer.cli.params import Duration, SwapArgs, complete_from_stack, json_option, swap_options
from composer.cli.swap import report_swap, up_variants

TAKEOVER_HELP = (
    "Take down (or stop VARIANT of) a project another stack started (refused otherwise: their labels "
    "name that stack)."
)


@command()
@click.argument("variant", required=False, shell_complete=complete_from_stack("variant"))
@click.option(
    "--force", is_flag=True, help="Stop VARIANT even when nothing else would serve (the gateway stays)."
)
@click.option(
    "-v",
    "--volumes",
    is_flag=True,
    help="Also remove the project's named volumes (the gateway's state: its switch history).",
)
@click.option(
    "-t",
    "--timeout",
    "drain_timeout",
    type=Duration(zero=True),
    metavar="SECONDS",
    help="How long the requests in flight get to finish before they are cut (0: at once) "
    "[default: gateway.drain_timeout].",
)
@click.option("--dry-run", is_flag=True, help="Print the plan (what drains, stops and goes); change nothing.")
@json_option("Print the result (or the plan, or the error) as JSON.")
@click.option("--takeover", is_flag=True, help=TAKEOVER_HELP)
@click.pass_obj
def down(
    obj: Context,
    variant: str | None,
    force: bool,
    volumes: bool,
    drain_timeout: float | None,
    dry_run: bool,
    as_json: bool,
    takeover: bool,
) -> None:
    """Stop and remove the running variant(s), sleeping ones and the gateway too.

    Requests in flight are drained first: the gateway holds new ones and waits for those
    running, up to gateway.drain_timeout (-t to say how long); nothing serves afterwards, so
    no stream continues: what still runs then is cut, and `down` says how many. The
    project's volume (the gateway's state) stays, as with docker compose, unless --volumes.

    With VARIANT: stop only that variant's container(s), never the live set, the gateway or
    its port holder. A live member is drained out while the others serve on; a sleeping,
    idle or failed one is stopped; the one that serves is drained first, and refused when
    nothing else would serve (clients would be held, then answered 503) unless --force.

    A project another stack started (its containers' labels name that stack file) is
    refused, as `up` refuses it, unless --takeover.

    \b
    Examples:
      compose-spec down
      compose-spec down --dry-run
      compose-spec down -t 10s
      compose-spec down mtp
      compose-spec -p demo down --volumes
    """
    import math

    from composer.errors import UsageError
    from composer.swap.down import down as stop
    from composer.swap.down import down_variant, kept_volumes

    stack = obj.stack()
    if drain_timeout is not None:  # seconds, as gateway.drain_timeout counts them
        stack = replace(stack, gateway=replace(stack.gateway, drain_timeout=math.ceil(drain_timeout)))
    if variant is not None:
        if volumes:
            raise UsageError("--volumes removes the project's volumes: give it without VARIANT")
        if dry_run:
            raise UsageError("--dry-run prints the plan of `down` (the project): give it without VARIANT")
        stack.variant(variant)  # an unknown name: exit 2 with the known ones
        line = LiveLine()
        try:
            said = down_variant(
                stack, variant, client=obj.docker(), force=force, takeover=takeover, progress=line.step
            )
        finally:
            line.finish()
        click.echo(json.dumps({"variant": variant, "outcome": said}) if as_json else said)
        return
    if force:
        raise UsageError("--force stops VARIANT even when nothing else would serve: give it with VARIANT")
    report_swap(
        stack.project,
        as_json,
        lambda line: stop(
            stack,
            client=obj.docker(),
            progress=line.step,
            waiting=line.waiting,
            volumes=volumes,
            takeover=takeover,
            dry_run=dry_run,
        ),
        dry_run=dry_run,
    )
    kept = None if volumes or dry_run else kept_volumes(stack, obj.docker())
    if kept:
        note(kept)


@command()
@click.argument("variant", required=False, shell_complete=complete_from_stack("variant"))
@partial(swap_options, without=("--force-recreate",))
@click.pass_obj
def restart(obj: Context, variant: str | None, **opts: Any) -> None:
    """Restart the serving variant (or VARIANT, when it is the one serving) through `up`'s gate.

    Never a raw container restart: this is `up VARIANT --force-recreate`. The gateway holds
    new requests and drains (or continues) those in flight, a new container starts and must
    pass the health gate (/health, /v1/models, a completion) before clients are released to
    it, and the old one comes back if it fails. Unlike `docker compose restart`, a
    configuration the stack now renders differently is applied (it is `up`). A live set's
    member is not restarted here: `compose-spec down VARIANT` then `compose-spec up A B`
    (the others serve throughout).

    \b
    Examples:
      compose-spec restart
      compose-spec restart mtp --dry-run
    """
    from composer.swap.down import restart_target

    stack = obj.stack()
    if variant is not None:
        stack.variant(variant)  # an unknown name: exit 2 with the known ones
    name = restart_target(stack, obj.docker(), variant)
    up_variants(obj, (name,), SwapArgs(**opts, force_recreate=True))
