"""The live-set side of `up` and `down`: several variants serving at once (composer.swap.live)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from composer.cli.context import Context, require_api_key
from composer.cli.output import LiveLine
from composer.cli.swap_args import SwapArgs, report_swap
from composer.errors import ConfigError

if TYPE_CHECKING:
    from composer.stack.model import Stack


def live_up(obj: Context, variants: tuple[str, ...], args: SwapArgs) -> bool:
    """`up` on a live set (several variants, `[gateway] live`, or live containers running):
    start and gate the new containers, drain and stop the leaving ones. False: not live."""
    from composer.swap.live import up_live, wants_live

    stack = obj.stack()
    for name in variants:
        stack.startable(name)  # an unknown or refused name: exit 2 before anything starts
    if not wants_live(stack, variants, obj.docker):
        return False
    if args.force_recreate:
        raise ConfigError("--force-recreate restarts the one serving variant; this up changes a live set")
    if len(variants) > 1:
        from composer.stack.placement import live_members

        live_members(stack, variants)  # overlapping GPU sets: exit 2 before Docker is asked anything
    allow_weak = args.weak_key_allowed(obj)
    require_api_key(stack, allow_weak)

    report_swap(
        "+".join(variants or stack.gateway.live),
        args.as_json,
        lambda line: up_live(
            stack,
            variants,
            client=obj.docker(),
            timeout=args.timeout,
            settle=args.settle,
            wait_for_lock=not args.no_wait,
            dry_run=args.dry_run,
            progress=line.step,
            waiting=line.waiting,
            options=args.up_options(allow_weak, obj),
        ),
        dry_run=args.dry_run,
    )
    return True


def down_live_variant(obj: Context, stack: Stack, variant: str, line: LiveLine) -> bool:
    """`down VARIANT` when it runs in a live set: drain and stop it, the others serve on.
    False when it is not live (the one-variant `down` handles it)."""
    from composer.swap.live import down_live, live_containers

    if not any(r.variant == variant and r.status == "running" for r in live_containers(stack, obj.docker())):
        return False
    said = down_live(stack, variant, client=obj.docker(), progress=line.step)
    line.finish()
    click.echo(said)
    return True


def live_names(obj: Context, stack: Stack) -> list[str]:
    """The running live members (`down` names what it stops); empty when Docker does not answer."""
    from composer.swap.live import live_containers

    try:
        return [r.name for r in live_containers(stack, obj.docker()) if r.status == "running"]
    except Exception:  # `down` itself reports Docker's failure
        return []
