"""The `compose-spec` command line: thin commands over the domain modules.

The only module that imports click. Every error is handled in one place
(`ComposeSpecGroup.main`): one line on stderr, and exit 2 for usage and configuration
errors, 1 for failures, 130 when interrupted (Ctrl-C). A command run with `--json`
prints exactly one JSON object on stdout when it fails:
`{"error": MESSAGE, "kind": FAMILY, "exit_code": N, ...}`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

from composer.errors import (
    ComposerError,
    ConfigError,
    DiagnosedError,
    Interrupted,
    SwapFailed,
    UsageError,
    did_you_mean,
)

EXIT_CODES = "0 success, 1 failure, 2 usage or configuration error, 130 interrupted (Ctrl-C)"
GLOBAL_OPTIONS = {"--env-file", "--stack", "--set", "--context"}
DEBUG_VAR = "COMPOSE_SPEC_DEBUG"


class Context:
    """Global options shared by every command."""

    def __init__(self, env_file: str, stacks: tuple[str, ...], sets: tuple[str, ...]) -> None:
        self.env_file = env_file
        self.stacks = stacks
        self.sets = sets

    def stack(self, extra_sets: tuple[str, ...] = ()):
        from composer.stack.load import load_stack

        return load_stack(self.stacks or None, self.env_file, flags=(*self.sets, *extra_sets))

    def stack_alone(self):
        """The stack from its files alone: no env file, no environment, no --set."""
        from composer.stack.files import STACK_FILES_VAR, read_dotenv
        from composer.stack.load import load_stack

        dotenv, _ = read_dotenv(self.env_file)
        listed = os.environ.get(STACK_FILES_VAR) or dotenv.get(STACK_FILES_VAR)
        return load_stack(self.stacks or None, None, environ={STACK_FILES_VAR: listed} if listed else {})


def _error_object(err: ComposerError) -> dict[str, Any]:
    """The `--json` form of a failure."""
    data: dict[str, Any] = {"error": str(err), "kind": err.kind, "exit_code": _exit_code(err)}
    if isinstance(err, DiagnosedError):
        data["hints"] = list(err.hints)
        data["log_tail"] = err.log_tail
    data.update(err.details)
    if _exit_code(err) == 130:
        data["kind"] = Interrupted.kind
    return data


def _exit_code(err: ComposerError) -> int:
    """The error's exit code; 130 when it was caused by an interrupt."""
    return 130 if isinstance(err.__cause__, KeyboardInterrupt) else err.exit_code


class ComposeSpecCommand(click.Command):
    """A command whose help ends with its exit codes."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        notes = EXIT_NOTES.get(self.name or "", "")
        formatter.write_paragraph()
        formatter.write_text(f"Exit codes: {EXIT_CODES}{'; ' + notes if notes else ''}.")


class ComposeSpecGroup(click.Group):
    """The command group: central error handling and close-match suggestions."""

    command_class = ComposeSpecCommand

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, ...]:
        name = args[0] if args else ""
        unknown = name and not name.startswith("-") and self.get_command(ctx, name) is None
        if unknown and not ctx.resilient_parsing:
            hint = did_you_mean(name, self.list_commands(ctx))
            raise click.UsageError(f"No such command {name!r}{':' + hint if hint else '.'}", ctx)
        return super().resolve_command(ctx, args)

    def command_of(self, argv: Sequence[str]) -> click.Command | None:
        """The command an argument list runs (global options and their values skipped)."""
        skip = False
        for word in argv:
            if skip:
                skip = False
            elif word in GLOBAL_OPTIONS:
                skip = True
            elif not word.startswith("-"):
                return self.commands.get(word)
        return None

    def wants_json(self, argv: Sequence[str]) -> bool:
        """True when the command supports --json and it was given."""
        command = self.command_of(argv)
        supports = command is not None and any(p.name == "as_json" for p in command.params)
        return supports and "--json" in argv

    def main(self, args: Sequence[str] | None = None, *posargs: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        argv = list(sys.argv[1:] if args is None else args)
        kwargs["standalone_mode"] = False
        as_json = self.wants_json(argv)
        try:
            result = super().main(argv, *posargs, **kwargs)
        except (KeyboardInterrupt, click.exceptions.Abort):
            self._exit(Interrupted("interrupted"), as_json, quiet=True)
        except click.ClickException as err:
            if as_json:
                click.echo(
                    json.dumps({"error": err.format_message(), "kind": "usage", "exit_code": err.exit_code})
                )
            err.show()
            sys.exit(err.exit_code)
        except ComposerError as err:
            self._exit(err, as_json)
        except Exception as err:
            if os.environ.get(DEBUG_VAR):
                raise
            wrapped = ComposerError(
                f"unexpected {type(err).__name__}: {err} (set {DEBUG_VAR}=1 to see the traceback)"
            )
            wrapped.kind = "internal"
            self._exit(wrapped, as_json)
        sys.exit(result if isinstance(result, int) else 0)

    @staticmethod
    def _exit(err: ComposerError, as_json: bool, quiet: bool = False) -> None:
        if isinstance(err, DiagnosedError):
            if err.log_tail and not err.tail_shown:  # a swap shows it before rolling back
                click.echo(err.log_tail.rstrip(), err=True)
            for hint in err.hints:
                click.echo(f"hint: {hint}", err=True)
        if as_json:
            click.echo(json.dumps(_error_object(err)))
        if not quiet:
            click.echo(f"compose-spec: error: {err}", err=True)
        sys.exit(_exit_code(err))


def context_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """The global `--context NAME`: the Docker engine every command talks to."""
    return click.option(
        "--context",
        "docker_context",
        default=None,
        metavar="NAME",
        help="Docker context to use (like `docker --context`) [default: DOCKER_HOST, else the current one].",
    )(func)


def _select_engine(docker_context: str | None) -> None:
    """Point the one Docker client factory and `docker compose` at the chosen context."""
    from composer.engine.client import select_context

    select_context(docker_context)


def fail(message: str, code: int = 1) -> None:
    """Stop the command with one error line and an exit code (1 failure, 2 usage)."""
    raise UsageError(message) if code == 2 else ComposerError(message)


def _complete(kind: str) -> Callable[[click.Context, click.Parameter, str], list[CompletionItem]]:
    """Shell completion of variant or workload names from the stack the global options name."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        from composer.stack.load import load_stack

        params = ctx.find_root().params
        try:
            stack = load_stack(
                params.get("stacks") or None, params.get("env_file"), flags=params.get("sets") or ()
            )
        except Exception:  # completion never fails loudly
            return []
        names = stack.variants if kind == "variant" else stack.workloads
        return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]

    return complete


@click.group(
    name="compose-spec", cls=ComposeSpecGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option(
    "--env-file", default=".env", show_default=True, help="Env file with host values and VLLM_API_KEY."
)
@click.option(
    "--stack",
    "stacks",
    multiple=True,
    help="Stack file(s), merged in order; replaces the default composer.toml [default: composer.toml].",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a stack value, e.g. --set stack.port=8001.",
)
@context_option
@click.version_option(package_name="vllm-variant-composer")
@click.pass_context
def main(
    ctx: click.Context,
    env_file: str,
    stacks: tuple[str, ...],
    sets: tuple[str, ...],
    docker_context: str | None,
) -> None:
    """Render, build, swap and benchmark vLLM containers behind one port and one served name.

    \b
    Examples:
      compose-spec --env-file .env.demo up mtp
      compose-spec status --watch

    \b
    Shell completion (bash; zsh and fish alike):
      eval "$(_COMPOSE_SPEC_COMPLETE=bash_source compose-spec)"
    """
    ctx.obj = Context(env_file, stacks, sets)
    _select_engine(docker_context)


TARGETS = ("compose", "kubernetes")


def target_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--target compose|kubernetes` (render and up)."""
    return click.option(
        "--target",
        type=click.Choice(TARGETS),
        default="compose",
        show_default=True,
        help="Docker Compose on this engine, or Kubernetes manifests and rollouts.",
    )(func)


def _default_render_dir(stack: Any, target: str) -> Path:
    """The committed folder of a target: compose/ or kubernetes/ next to the stack file."""
    if target == "kubernetes":
        from composer.render.kubernetes import kube_dir

        return kube_dir(stack)
    return stack.render_dir


def _rendered_files(stack: Any, target: str, variants: list[str], out_dir: str | None) -> list[Any]:
    """The files `render` writes for a target, rendered in memory."""
    if target == "kubernetes":
        from composer.render.kubernetes import kube_dir, render_kubernetes

        return render_kubernetes(stack, variants, Path(out_dir) if out_dir else kube_dir(stack))
    from composer.render.files import render_all

    return render_all(stack, variants, Path(out_dir) if out_dir else stack.render_dir)


EXIT_NOTES = {
    "render": "with --check, 1 when a file is stale",
    "doctor": "1 when any check fails",
    "bench": "1 when a point failed (named); 130 after writing what was measured",
    "logs": "130 ends -f",
    "status": "130 ends --watch",
}


@main.command()
@click.argument("variants", nargs=-1, shell_complete=_complete("variant"))
@click.option("--check", is_flag=True, help="Write nothing; exit 1 listing files that are stale.")
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder for a local render with env-file and --set values "
    "[default: compose/ (or kubernetes/) next to the stack file].",
)
@target_option
@click.pass_obj
def render(obj: Context, variants: tuple[str, ...], check: bool, out_dir: str | None, target: str) -> None:
    """Write compose/<variant>.yml and compose/<variant>.sh for each variant (all by default).

    The committed compose/ folder next to the stack file is rendered from the stack
    files alone: the env file, the environment and --set never reach it. A local render
    with those values goes to --out DIR. With --target kubernetes: kubernetes/base and
    kubernetes/overlays/<variant> (kustomize).

    \b
    Examples:
      compose-spec render                      # the committed compose/ files
      compose-spec --env-file .env render mtp --out /tmp/local
      compose-spec render --target kubernetes
    """
    from composer.render.files import is_current, write_all

    stack = obj.stack()
    committed_dir = _default_render_dir(stack, target)
    if out_dir and Path(out_dir).resolve() != committed_dir.resolve():
        files = _rendered_files(stack, target, list(variants), out_dir)
    else:
        if obj.sets:
            fail(
                f"--set does not reach the committed {_shown(committed_dir)}/ files (they come from the "
                "stack files alone): render a local copy with --out DIR",
                2,
            )
        local = _rendered_files(stack, target, list(variants), None)
        files = _rendered_files(obj.stack_alone(), target, list(variants), None)
        if [f.content for f in local] != [f.content for f in files]:
            click.echo(
                f"note: values from {obj.env_file} and the environment are not written into "
                f"{_shown(committed_dir)}/ (rendered from the stack files alone): use --out DIR for a "
                "local render",
                err=True,
            )
    if check:
        stale = [f for f in files if not is_current(f)]
        for file in stale:
            click.echo(f"stale: {_shown(file.path)}")
        if stale:
            again = "" if target == "compose" else f" --target {target}"
            fail(f"{len(stale)} rendered file(s) are stale: run `compose-spec render{again}`", 1)
        click.echo(f"{len(files)} rendered file(s) are current")
        return
    for file, written in zip(files, write_all(files), strict=True):
        click.echo(f"{'wrote' if written else 'unchanged'}: {_shown(file.path)}")


def _shown(path: Path) -> Path:
    """A path relative to the working directory when it lies below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


@main.command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--env", "with_env", is_flag=True, help="Also write .env with a generated API key (mode 0600).")
@click.option("--force", is_flag=True, help="Overwrite existing starter files (never .env).")
def init_cmd(directory: Path, with_env: bool, force: bool) -> None:
    """Write a starter composer.toml and .env.example into DIRECTORY (default: here).

    \b
    Examples:
      compose-spec init my-stack --env && cd my-stack && compose-spec render
      compose-spec init --force
    """
    from composer.stack.starter import init_stack

    for written in init_stack(directory, with_env=with_env, force=force):
        click.echo(f"wrote: {_shown(written.path)}")
    click.echo("next: edit composer.toml and .env, then `compose-spec render` and `compose-spec doctor`")


@main.command("config")
@click.argument("variant", required=False, shell_complete=_complete("variant"))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def config_cmd(obj: Context, variant: str | None, as_json: bool) -> None:
    """Print the resolved stack and where each value came from (API key masked).

    \b
    Examples:
      compose-spec config
      compose-spec --env-file .env.demo config dflash2 --json
    """
    from composer.render.describe import format_stack, stack_data

    data = stack_data(obj.stack(), variant)
    click.echo(json.dumps(data, indent=2) if as_json else format_stack(data))


class LiveLine:
    """Progress output: one rewritten line on a TTY, plain lines on stage changes otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = ""
        self.open = False

    def step(self, message: str) -> None:
        self.finish()
        click.echo(message, err=True)

    def waiting(self, message: str) -> None:
        if self.tty:
            click.echo(f"\r\033[K{message}", err=True, nl=False)
            self.open = True
            return
        stage = message.split(" (")[0]
        if stage != self.last:
            click.echo(message, err=True)
            self.last = stage

    def finish(self) -> None:
        if self.open:
            click.echo("", err=True)
            self.open = False


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _require_api_key(stack: Any) -> None:
    """Commands that talk to the server need the key: its absence is a configuration error."""
    if not stack.api_key:
        raise ConfigError(
            "VLLM_API_KEY is not set: put it in the env file (--env-file, default .env) or the "
            "environment (see .env.example)"
        )


def _swap(obj: Context, variant_or_workload: str, workload: bool, opts: dict[str, Any]) -> None:
    import signal

    from composer.engine.client import docker_client
    from composer.render.target import resolve_target
    from composer.swap.swapper import UpOptions, up

    stack = obj.stack()
    variant = stack.workload_variant(variant_or_workload).name if workload else variant_or_workload
    target = resolve_target(stack, variant)
    _require_api_key(stack)
    options = UpOptions(
        timeout=opts["timeout"],
        rollback=not opts["no_rollback"],
        wait_for_lock=not opts["no_wait"],
        allow_weak_key=opts["allow_weak_key"],
        settle=opts["settle"],
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    _report_swap(
        variant,
        opts,
        lambda line: up(
            stack, target, client=docker_client(), options=options, progress=line.step, waiting=line.waiting
        ),
    )


def _report_swap(variant: str, opts: dict[str, Any], run: Callable[[LiveLine], Any], where: str = "") -> None:
    """Run a swap with a live progress line; print its warnings, notes and outcome (or JSON).

    A failed swap's error carries the variant and the outcome for the `--json` error object."""
    line = LiveLine()
    try:
        result = run(line)
    except SwapFailed as err:
        line.finish()
        err.details.update(variant=variant, outcome="rolled-back" if err.rolled_back else "failed")
        raise
    line.finish()
    for warning in getattr(result, "warnings", ()):
        click.echo(f"warning: {warning}", err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if opts["as_json"]:
        click.echo(
            json.dumps({**result.__dict__, "timings": {k: round(v, 3) for k, v in result.timings.items()}})
        )
    else:
        total = result.timings.get("total", 0.0)
        click.echo(f"{variant}: {result.outcome}{where} ({total:.1f}s)")


def swap_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by `up` and `use`."""
    options = [
        click.option("--timeout", default=900.0, show_default=True, help="Seconds to wait for readiness."),
        click.option("--no-rollback", is_flag=True, help="On failure, do not restart the previous variant."),
        click.option(
            "--settle", default=1.0, show_default=True, help="Seconds to keep watching after readiness."
        ),
        click.option("--no-wait", is_flag=True, help="Fail instead of waiting when another swap runs."),
        click.option(
            "--allow-weak-key", is_flag=True, help="Accept a weak or short VLLM_API_KEY (a warning instead)."
        ),
        click.option("--json", "as_json", is_flag=True, help="Print the result (or the error) as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@main.command()
@click.argument("variant", shell_complete=_complete("variant"))
@swap_options
@target_option
@click.pass_obj
def up(obj: Context, variant: str, target: str, **opts: Any) -> None:
    """Swap VARIANT in: stop the old one, start and health-gate the new one, roll back on failure.

    With --target kubernetes: kubectl apply -k, rollout status, the same gate through the
    Service, and kubectl rollout undo on failure.

    \b
    Examples:
      compose-spec up mtp
      compose-spec --env-file .env.demo up dflash2 --timeout 1200 --json
      compose-spec up mtp --target kubernetes
    """
    if target == "kubernetes":
        _kube_up(obj, variant, opts)
        return
    _swap(obj, variant, False, opts)


def _kube_up(obj: Context, variant: str, opts: dict[str, Any]) -> None:
    """`up --target kubernetes`: a rollout of the variant's overlay, undone on failure."""
    from composer.kube.rollout import KubeUpOptions, up_kubernetes
    from composer.render.target import resolve_target

    stack = obj.stack()
    options = KubeUpOptions(timeout=opts["timeout"], rollback=not opts["no_rollback"])
    _report_swap(
        variant,
        opts,
        lambda line: up_kubernetes(
            stack, resolve_target(stack, variant), options=options, progress=line.step, waiting=line.waiting
        ),
        " on Kubernetes",
    )


@main.command()
@click.argument("workload", shell_complete=_complete("workload"))
@swap_options
@click.pass_obj
def use(obj: Context, workload: str, **opts: Any) -> None:
    """Swap to the variant mapped to WORKLOAD in composer.toml ([workloads]).

    \b
    Examples:
      compose-spec use chat
      compose-spec use long-prompt --json
    """
    _swap(obj, workload, True, opts)


@main.command()
@click.option("--timeout", default=900.0, show_default=True, help="Seconds each switch waits for readiness.")
@click.option("--settle", default=1.0, show_default=True, help="Seconds to keep watching after readiness.")
@click.option("--max-switches", type=click.IntRange(min=1), default=None, help="Stop after N switches.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per decision instead of a line.")
@click.pass_obj
def follow(obj: Context, timeout: float, settle: float, max_switches: int | None, as_json: bool) -> None:
    """Run the switches the gateway asks for (switch_on_model, policy = "auto").

    Waits on the gateway's control channel for a switch demand, runs it through the same
    gated swap as `up` (with rollback), reports the outcome to the gateway, and logs each
    decision with its reason. Runs until Ctrl-C or SIGTERM; keep one per stack.

    \b
    Examples:
      compose-spec follow
      compose-spec --env-file .env.demo follow --json
    """
    import signal
    import threading

    from composer.engine.client import docker_client
    from composer.swap.follow import FollowEvent
    from composer.swap.follow import follow as run_follow
    from composer.swap.swapper import UpOptions

    stack = obj.stack()
    _require_api_key(stack)
    if not stack.gateway.switches:
        raise ConfigError(
            "follow has nothing to run: set gateway.switch_on_model = true or gateway.policy = 'auto'"
        )

    def emit(event: FollowEvent) -> None:
        stamp = time.strftime("%H:%M:%S")
        click.echo(json.dumps({"time": stamp, **event.to_json()}) if as_json else f"{stamp} {event.line()}")

    signal.signal(signal.SIGTERM, _raise_interrupt)
    options = UpOptions(timeout=timeout, settle=settle)
    emit(FollowEvent("start", None, f"following the gateway of project {stack.project}"))
    stop = threading.Event()
    try:
        count = run_follow(
            stack, client=docker_client(), options=options, emit=emit, stop=stop, max_switches=max_switches
        )
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM between switches: the normal way to end
        emit(FollowEvent("stop", None, "stopped by a signal"))
        return
    emit(FollowEvent("stop", None, f"{count} switches run"))


@main.command()
@click.argument("variant", required=False, shell_complete=_complete("variant"))
@click.option("--force", is_flag=True, help="Stop VARIANT even when it serves while others sleep.")
@click.pass_obj
def down(obj: Context, variant: str | None, force: bool) -> None:
    """Stop and remove the running variant, sleeping ones and the gateway too.

    With VARIANT: stop only that variant's container. A sleeping one is always stopped;
    the serving one is refused while others sleep (nothing would serve) unless --force;
    the only variant running takes the whole project down, like `down`.

    \b
    Examples:
      compose-spec down
      compose-spec down mtp
      compose-spec --env-file .env.demo down
    """
    from composer.engine.client import docker_client
    from composer.swap.swapper import down as stop
    from composer.swap.swapper import down_variant

    line = LiveLine()
    stack = obj.stack()
    if variant is not None:
        stack.variant(variant)  # an unknown name: exit 2 with the known ones
        said = down_variant(stack, variant, client=docker_client(), force=force, progress=line.step)
        line.finish()
        click.echo(said)
        return
    stopped = stop(stack, client=docker_client(), progress=line.step)
    click.echo(f"stopped {stopped}" if stopped else "nothing was running")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with --watch: one object per change).")
@click.option("-w", "--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between refreshes with --watch.")
@click.pass_obj
def status(obj: Context, as_json: bool, watch: bool, interval: float) -> None:
    """Show the running variant: readiness, served name, port, image, uptime; or why none runs.

    Readiness is the swap gate's own verdict (/health, /v1/models, a 1-token completion);
    Docker's healthcheck is shown only when it disagrees (unhealthy, or healthy while
    the gate fails). A crashed variant is shown with its exit code, when, and its last
    log lines.

    \b
    Examples:
      compose-spec status
      compose-spec status --watch --interval 1
    """
    from composer.engine.client import docker_client
    from composer.swap.status import format_status, status_data, without_clock

    stack = obj.stack()
    client = docker_client()

    def show(data: dict[str, Any]) -> str:
        return json.dumps(data, indent=None if watch else 2) if as_json else format_status(data)

    if not watch:
        click.echo(show(status_data(stack, client)))
        return
    tty = sys.stdout.isatty()
    last: dict[str, Any] | None = None
    while True:
        data = status_data(stack, client)
        if tty:
            click.clear()
            click.echo(f"every {interval:g}s; Ctrl-C to stop\n\n{show(data)}")
        elif without_clock(data) != last:
            click.echo(show(data) + ("" if as_json else "\n"))
            last = without_clock(data)
        time.sleep(interval)


@main.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def ls_cmd(obj: Context, as_json: bool) -> None:
    """List every variant: method, K, image, whether the image is here, and which one serves.

    \b
    Examples:
      compose-spec ls
      compose-spec variants --json
    """
    from composer.swap.status import format_variants, variants_data

    client = None
    try:
        from composer.engine.client import docker_client

        client = docker_client(timeout=10)
    except ComposerError as err:
        click.echo(f"note: {err} (image presence and the serving variant are unknown)", err=True)
    rows = variants_data(obj.stack(), client)
    click.echo(json.dumps(rows, indent=2) if as_json else format_variants(rows))


main.add_command(ls_cmd, "variants")


class TailType(click.ParamType):
    """`--tail N` or `--tail all`."""

    name = "N|all"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "all":
            return None
        try:
            number = int(value)
        except ValueError:
            number = -1
        if number < 0:
            self.fail(f"{value!r}: expected a number of lines (0 or more) or 'all'", param, ctx)
        return number


@main.command()
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines, across swaps, until Ctrl-C.")
@click.option("--tail", default="200", show_default=True, type=TailType(), help="Lines to show, or 'all'.")
@click.option("--since", help="Only lines since a time: 10m, 2h, 90s, or 2024-05-01T10:00:00.")
@click.option("-t", "--timestamps", is_flag=True, help="Prefix each line with its time.")
@click.option("--explain", is_flag=True, help="Explain known failure lines with their fixes.")
@click.option("--failed", is_flag=True, help="The log kept from the last failed swap.")
@click.pass_obj
def logs(
    obj: Context,
    follow: bool,
    tail: int | None,
    since: str | None,
    timestamps: bool,
    explain: bool,
    failed: bool,
) -> None:
    """Print the newest variant container's log (running or exited), or the last failed one.

    With -f it follows the service across swaps, like `docker compose logs -f`: when the
    container goes away it waits for the next one and goes on. The API key is masked.

    \b
    Examples:
      compose-spec logs -f --tail 20
      compose-spec logs --failed --explain
    """
    from composer.engine.bootlog import redact
    from composer.swap.logs import parse_since

    stack = obj.stack()
    since_time = parse_since(since) if since else None
    if failed:
        if follow:
            fail("--failed reads a saved log: it cannot be combined with -f", 2)
        _print_failed_log(stack, tail, explain)
        return
    from composer.engine.client import docker_client
    from composer.engine.containers import our_containers

    client = docker_client()
    if follow and not explain:
        from composer.swap.logs import follow_service

        for event in follow_service(stack, client, tail=tail, since=since_time, timestamps=timestamps):
            if event.switch:
                click.echo(f"--- {event.text} ---", err=True)
            else:
                click.echo(redact(event.text, stack.api_key), nl=False)
        return
    containers = our_containers(stack, client)
    if not containers:
        fail("no variant container exists (start one with `compose-spec up VARIANT`)", 1)
    text = redact(containers[0].log(tail=tail, since=since_time, timestamps=timestamps), stack.api_key)
    if not explain:
        click.echo(text, nl=False)
        return
    _explain(text)
    from composer.swap.evidence import last_failure

    saved = last_failure(stack.project)
    if saved is not None:
        click.echo(
            f"note: the last failed swap ({saved.variant}, {saved.when}) kept its log: "
            "compose-spec logs --failed --explain",
            err=True,
        )


def _explain(text: str) -> None:
    from composer.engine.diagnose import explain as find_signatures

    found = find_signatures(text)
    if not found:
        click.echo("no known failure signature in the log")
    for signature in found:
        click.echo(f"{signature.name}: {signature.explanation}\n  fix: {signature.fix}")


def _print_failed_log(stack: Any, tail: int | None, explain: bool) -> None:
    from composer.engine.bootlog import redact
    from composer.swap.evidence import last_failure

    saved = last_failure(stack.project)
    if saved is None:
        fail(f"no failed swap has been recorded for project {stack.project}", 1)
    click.echo(f"last failed swap: {saved.variant} at {saved.when}: {saved.cause}", err=True)
    text = redact(saved.log, stack.api_key)
    if tail is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-tail:] if tail else [])
    if explain:
        _explain(text)
    else:
        click.echo(text, nl=False)


@main.command("build")
@click.argument("recipe")
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
    "--recipes-dir", default="images", show_default=True, type=click.Path(file_okay=False), hidden=True
)
@click.pass_obj
def build_cmd(
    obj: Context, recipe: str, dry_run: bool, pin: bool, force: bool, verify_cmd: str | None, recipes_dir: str
) -> None:
    """Build the overlay image of images/RECIPE offline (base must be local; never pulls).

    \b
    Examples:
      compose-spec build dflash2 --dry-run
      compose-spec --env-file .env.demo build dflash2
    """
    from composer.engine.client import docker_client
    from composer.overlay.builder import build_overlay
    from composer.overlay.recipe import load_recipe, verify_argv

    verify = verify_argv(verify_cmd) if verify_cmd is not None else None
    loaded = load_recipe(Path(recipes_dir), recipe, obj.stack().images)
    client = docker_client()
    try:
        result = build_overlay(
            client,
            loaded,
            dry_run=dry_run,
            pin=pin,
            force=force,
            progress=lambda line: click.echo(f"build {recipe}: {line}"),
            verify=verify,
        )
    finally:
        client.close()
    summary = {"built": "built", "current": "up to date", "dry-run": "dry run passed, nothing built"}
    click.echo(f"{result.tag}: {summary[result.status]}")


@main.command()
@click.argument("variant", required=False, shell_complete=_complete("variant"))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema 1).")
@click.pass_obj
def doctor(obj: Context, variant: str | None, as_json: bool) -> None:
    """Check the host, Docker, GPUs, checkpoints and secrets for VARIANT (all by default).

    \b
    Examples:
      compose-spec doctor
      compose-spec --env-file .env.demo doctor dflash2 --json
    """
    from composer.doctor.report import default_host, format_report, run_doctor
    from composer.errors import ChecksFailed

    report = run_doctor(obj.stack(), variant, default_host(obj.env_file))
    failed = [c for c in report.checks if c.failed]
    if failed:
        err = ChecksFailed(
            f"{len(failed)} check(s) failed: " + ", ".join(dict.fromkeys(c.name for c in failed))
        )
        if as_json:
            err.details.update(report.to_json())
        else:
            click.echo(format_report(report))
        raise err
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else format_report(report))


def _csv_list(value: str | None, convert: Callable[[str], Any] = str) -> tuple[Any, ...] | None:
    """`a,b,c` -> a tuple (None when not given); BadParameter on a bad item."""
    if not value:
        return None
    try:
        return tuple(convert(item.strip()) for item in value.split(",") if item.strip())
    except ValueError as err:
        raise click.BadParameter(f"{value!r}: {err}") from err


def _bench_options(
    prompt_file: str | None,
    prompt_tokens: str | None,
    concurrency: str | None,
    max_tokens: int,
    runs: int,
    warmup: int,
    timeout: float,
):
    """The bench options from the command line (lists parsed, prompts read)."""
    from composer.bench.prompts import bench_prompts
    from composer.bench.sweep import BenchOptions

    lengths = _csv_list(prompt_tokens, int)
    if prompt_file is not None and lengths is not None:
        raise UsageError("give either --prompt-file or --prompt-tokens, not both")
    return BenchOptions(
        prompts=bench_prompts(prompt_file),
        max_tokens=max_tokens,
        runs=runs,
        warmup=warmup,
        request_timeout=timeout,
        concurrency=_csv_list(concurrency, int) or (1,),
        prompt_tokens=lengths or (None,),
    )


@main.command()
@click.option("--variants", help="Comma-separated variants to measure [default: all in the stack].")
@click.option("--k", "ks", help="Comma-separated K values for speculative variants [default: 1,3,4,7,10].")
@click.option("--prompt-file", type=click.Path(dir_okay=False), help="Prompts separated by lines of `---`.")
@click.option(
    "--prompt-tokens",
    help="Comma-separated prompt lengths: pad the built-in prompts to about N tokens (e.g. 128,2000,16000).",
)
@click.option(
    "--concurrency",
    help="Comma-separated numbers of concurrent streams per point (e.g. 1,4,16) [default: 1].",
)
@click.option("--max-tokens", default=512, show_default=True, help="Tokens generated per request.")
@click.option("--runs", default=5, show_default=True, help="Measured requests per point and stream.")
@click.option("--warmup", default=1, show_default=True, help="Uncounted warm-up requests per point.")
@click.option(
    "--out",
    "out_dir",
    default="bench-results",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where bench.json, bench.csv and bench.png go.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@click.option("--timeout", default=900.0, show_default=True, help="Seconds per swap and per request.")
@click.option("--decide", is_flag=True, help="Switch or adapt: every arm over 1-32 streams, then a decision.")
@click.pass_obj
def bench(
    obj: Context,
    variants: str | None,
    ks: str | None,
    prompt_file: str | None,
    prompt_tokens: str | None,
    concurrency: str | None,
    max_tokens: int,
    runs: int,
    warmup: int,
    out_dir: str,
    as_json: bool,
    timeout: float,
    decide: bool = False,
) -> None:
    """Measure warm decode speed, acceptance and correctness per variant and K; restore after.

    Ctrl-C stops the sweep, brings back the variant that served before (once) and
    writes the points measured so far.

    \b
    Examples:
      compose-spec bench --variants baseline,mtp --k 1,3,7 --runs 5
      compose-spec bench --variants mtp --prompt-tokens 2000 --json --out results/
      compose-spec bench --variants baseline,mtp --k 7 --concurrency 1,4,16 --prompt-tokens 128,2000,16000
      compose-spec --stack composer.toml --stack adaptive.toml bench --decide
    """
    import signal

    from composer.bench import decide as arms
    from composer.bench.report import format_table, report_data, write_outputs
    from composer.bench.swaps import bench_with_swaps
    from composer.engine.client import docker_client
    from composer.errors import BenchError

    if decide:
        concurrency = concurrency or ",".join(map(str, arms.DECIDE_CONCURRENCY))
        prompt_tokens = prompt_tokens or (
            None if prompt_file else ",".join(map(str, arms.DECIDE_PROMPT_TOKENS))
        )
    options = _bench_options(prompt_file, prompt_tokens, concurrency, max_tokens, runs, warmup, timeout)
    stack = obj.stack()
    plan = arms.plan_arms(stack, arms.image_present, _csv_list(ks, int)) if decide else None
    names = _csv_list(variants) or (plan.variants if plan else tuple(stack.variants))
    for name in names:
        stack.variant(name)
    k_values = _csv_list(ks, int)
    _require_api_key(stack)
    line = LiveLine()
    client = docker_client()
    signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM also restores the previous variant
    try:
        report = bench_with_swaps(
            lambda flags: obj.stack(extra_sets=flags),
            names,
            k_values,
            options,
            client=client,
            swap_timeout=timeout,
            progress=line.step,
            waiting=line.waiting,
            ks_by_variant=plan.ks_by_variant if plan else None,
        )
    finally:
        line.finish()
        client.close()
    written = write_outputs(report, Path(out_dir))
    data = report_data(report)
    if plan is not None and report.measured():
        decision = arms.decide(data, plan, arms.switch_seconds(data))
        written += arms.write_decision(decision, Path(out_dir))
        data["decide"] = arms.decision_data(decision)
        data["decide"]["notes"] = list(plan.notes)
    click.echo("wrote: " + ", ".join(str(p) for p in written), err=True)
    failed = report.failed_points()
    error: ComposerError | None = None
    if report.interrupted:
        error = Interrupted(
            f"{report.interrupted}: wrote the {len(report.measured())} point(s) measured so far"
        )
    elif failed:
        error = BenchError(
            f"{len(failed)} point(s) failed: " + "; ".join(f"{r.point.label}: {r.error}" for r in failed)
        )
    if error is None or not as_json:
        click.echo(json.dumps(data, indent=2) if as_json else format_table(report))
        if not as_json and "decide" in data:
            click.echo("\n" + arms.format_decision(decision))
            for note in plan.notes if plan else ():
                click.echo(f"note: {note}")
    if error is not None:
        error.details.update(data)
        raise error


@main.command()
@click.option(
    "--from",
    "source",
    default="bench-results/bench.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The benchmark's JSON (from `bench --concurrency ... --prompt-tokens ...`).",
)
@click.option(
    "--write", is_flag=True, help="Write the proposed keys into the stack file's [workloads] table."
)
@click.option("--json", "as_json", is_flag=True, help="Print the winners and the block as JSON.")
@click.pass_obj
def recommend(obj: Context, source: str, write: bool, as_json: bool) -> None:
    """Name the variant and K that won each workload (prompt length x streams) and propose [workloads].

    Classes: chat (prompts up to 512 tokens, or as given), medium (up to 4096), long
    (longer), each followed by the number of streams: chat-1, long-16. The winner has the
    highest aggregate tok/s. --write keeps every other line of the first stack file,
    comments included, and checks that the stack still loads.

    \b
    Examples:
      compose-spec recommend --from bench-results/bench.json
      compose-spec recommend --write
    """
    from composer.bench.recommend import (
        format_wins,
        k_notes,
        read_bench,
        winners,
        workloads_block,
        write_workloads,
    )
    from composer.stack.files import find_stack_files, read_dotenv

    wins = winners(read_bench(source))
    stack = obj.stack()
    unknown = sorted({w.variant for w in wins} - set(stack.variants))
    if unknown:
        raise ConfigError(
            f"the benchmark measured variant(s) {', '.join(unknown)} that the stack does not define; "
            "known: " + ", ".join(sorted(stack.variants))
        )
    configured = {
        name: v.speculative.num_speculative_tokens for name, v in stack.variants.items() if v.speculative
    }
    notes = k_notes(wins, configured)
    written = None
    if write:
        dotenv, _ = read_dotenv(obj.env_file)
        written = find_stack_files(obj.stacks or None, os.environ, dotenv)[0]
        write_workloads(written, wins)
        obj.stack()  # the written table must load
        notes.append(f"wrote {len(wins)} workload(s) into [workloads] of {written}")
    block = workloads_block(wins)
    if as_json:
        data = {"workloads": [w.to_json() for w in wins], "block": block, "notes": notes}
        data["written"] = str(written) if written else None
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(format_wins(wins))
    click.echo("\nproposed:\n" + block.rstrip("\n"))
    for note in notes:
        click.echo(f"note: {note}")


if __name__ == "__main__":  # pragma: no cover
    main()
