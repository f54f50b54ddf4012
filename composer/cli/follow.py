"""`compose-spec follow`: run the switches the gateway asks for."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import click

from composer.cli.base import Context, command, require_api_key
from composer.cli.params import duration_option, json_option, settle_option
from composer.errors import ConfigError


@command()
@duration_option("--timeout", "15m", "How long each switch waits for readiness.")
@settle_option
@click.option("--max-switches", type=click.IntRange(min=1), default=None, help="Stop after N switches.")
@json_option("One JSON object per decision instead of a line.")
@click.option(
    "--print-systemd-unit",
    is_flag=True,
    help="Print a systemd service unit that runs this follow (restart on failure, this "
    "directory, the env file and stack files in force); run nothing.",
)
@click.pass_obj
def follow(
    obj: Context,
    timeout: float,
    settle: float,
    max_switches: int | None,
    as_json: bool,
    print_systemd_unit: bool,
) -> None:
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
    from composer.swap.outcome import UpOptions

    stack = obj.stack()
    require_api_key(stack, obj.options.allow_weak_key)
    if not stack.gateway.switches:
        raise ConfigError(
            "follow has nothing to run: set gateway.switch_on_model = true or gateway.policy = 'auto'"
        )
    if print_systemd_unit:
        click.echo(_systemd_unit(obj, stack.project, timeout, settle, as_json), nl=False)
        return

    def emit(event: FollowEvent) -> None:
        stamp = time.strftime("%H:%M:%S")
        with contextlib.suppress(OSError, ValueError):  # a closed pipe never stops a switch
            click.echo(
                json.dumps({"time": stamp, **event.to_json()}) if as_json else f"{stamp} {event.line()}"
            )

    options = UpOptions(timeout=timeout, settle=settle, allow_weak_key=obj.options.allow_weak_key)
    emit(FollowEvent("start", None, f"following the gateway of project {stack.project}"))
    stop = threading.Event()
    try:
        count = run_follow(
            stack, client=obj.docker(), options=options, emit=emit, stop=stop, max_switches=max_switches
        )
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the normal way to end, exit 130 like a shell
        stop.set()
    if stop.is_set():  # a signal, here or during a switch (which rolled back before it stopped)
        emit(FollowEvent("stop", None, "stopped by a signal"))
        raise SystemExit(130) from None  # the stop event says it all: no error object after it
    emit(FollowEvent("stop", None, f"{count} switches run"))


def _executable() -> list[str]:
    """The absolute command that runs this compose-spec: the script itself, else the one
    beside this Python, else `python -m composer`."""
    script = Path(sys.argv[0])
    if script.name == "compose-spec" and script.exists():
        return [os.path.abspath(script)]
    beside = Path(sys.executable).parent / "compose-spec"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("compose-spec")
    if found:
        return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "composer"]


def _systemd_unit(obj: Context, project: str, timeout: float, settle: float, as_json: bool) -> str:
    """The unit text for this follow, with every input in force written out absolute."""
    import getpass

    from composer.render import FollowUnit, render_follow_unit
    from composer.stack.values import format_seconds

    options = obj.options
    command = [*_executable(), "--env-file", os.path.abspath(options.env_file)]
    command += [word for path in obj.source.stack_files() for word in ("--stack", os.path.abspath(path))]
    command += [word for item in options.sets for word in ("--set", item)]
    command += ["--project-name", options.project_name] if options.project_name else []
    command += ["--context", options.docker_context] if options.docker_context else []
    command += ["--allow-weak-key"] if options.allow_weak_key else []
    command += ["follow", "--timeout", format_seconds(timeout), "--settle", format_seconds(settle)]
    command += ["--json"] if as_json else []
    environment = {}
    if not options.docker_context:
        environment = {k: os.environ[k] for k in ("DOCKER_HOST", "DOCKER_CONTEXT") if os.environ.get(k)}
    user = getpass.getuser() if os.geteuid() != 0 else None
    unit = FollowUnit(
        command=command,
        working_directory=os.getcwd(),
        project=project,
        user=user,
        environment=environment,
        stop_timeout=int(timeout) + 60,  # a swap under way rolls back before exiting
    )
    return render_follow_unit(unit)
