"""`compose-spec follow`: run the switches the gateway asks for."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import click

from composer.cli.base import command
from composer.cli.context import Context, require_api_key
from composer.cli.params import Duration, json_option
from composer.errors import ConfigError


@dataclass(frozen=True)
class FollowArgs:
    timeout: float
    settle: float
    max_switches: int | None
    as_json: bool


@command()
@click.option(
    "--timeout",
    type=Duration(),
    default="15m",
    show_default=True,
    help="How long each switch waits for readiness.",
)
@click.option(
    "--settle",
    type=Duration(),
    default="1s",
    show_default=True,
    help="How long to keep watching after readiness.",
)
@click.option("--max-switches", type=click.IntRange(min=1), default=None, help="Stop after N switches.")
@json_option("One JSON object per decision instead of a line.")
@click.pass_obj
def follow(obj: Context, **kwargs: object) -> None:
    """Run the switches the gateway asks for (switch_on_model, policy = "auto").

    Waits on the gateway's control channel for a switch demand, runs it through the same
    gated swap as `up` (with rollback), reports the outcome to the gateway, and logs each
    decision with its reason. Runs until Ctrl-C or SIGTERM; keep one per stack.

    \b
    Examples:
      compose-spec follow
      compose-spec follow --json --env-file .env.demo
    """
    from composer.swap.follow import FollowEvent
    from composer.swap.follow import follow as run_follow
    from composer.swap.swapper import UpOptions

    args = FollowArgs(**kwargs)  # type: ignore[arg-type]
    stack = obj.stack()
    require_api_key(stack, obj.allow_weak_key)
    if not stack.gateway.switches:
        raise ConfigError(
            "follow has nothing to run: set gateway.switch_on_model = true or gateway.policy = 'auto'"
        )

    def emit(event: FollowEvent) -> None:
        stamp = time.strftime("%H:%M:%S")
        click.echo(
            json.dumps({"time": stamp, **event.to_json()}) if args.as_json else f"{stamp} {event.line()}"
        )

    options = UpOptions(timeout=args.timeout, settle=args.settle, allow_weak_key=obj.allow_weak_key)
    emit(FollowEvent("start", None, f"following the gateway of project {stack.project}"))
    stop = threading.Event()
    try:
        count = run_follow(
            stack, client=obj.docker(), options=options, emit=emit, stop=stop, max_switches=args.max_switches
        )
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM between switches: the normal way to end
        emit(FollowEvent("stop", None, "stopped by a signal"))
        return
    emit(FollowEvent("stop", None, f"{count} switches run"))
