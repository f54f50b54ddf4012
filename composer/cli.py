"""The `compose-spec` command line: thin commands over the domain modules.

The only module that imports click. Domain errors become one line on stderr:
exit 2 for usage and configuration errors, 1 for failures.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from composer.errors import ComposerError, DiagnosedError


class Context:
    """Global options shared by every command."""

    def __init__(self, env_file: str, stacks: tuple[str, ...], sets: tuple[str, ...]) -> None:
        self.env_file = env_file
        self.stacks = stacks
        self.sets = sets

    def stack(self, extra_sets: tuple[str, ...] = ()):
        from composer.stack.load import load_stack

        return load_stack(self.stacks or None, self.env_file, flags=(*self.sets, *extra_sets))


def fail(message: str, code: int) -> None:
    """Print one error line and exit."""
    click.echo(f"compose-spec: error: {message}", err=True)
    sys.exit(code)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Map ComposerError to a one-line message and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except DiagnosedError as err:
            if err.log_tail:
                click.echo(err.log_tail.rstrip(), err=True)
            for hint in err.hints:
                click.echo(f"hint: {hint}", err=True)
            fail(str(err), err.exit_code)
        except ComposerError as err:
            fail(str(err), err.exit_code)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--env-file", default=".env", show_default=True, help="Env file with host values and VLLM_API_KEY."
)
@click.option(
    "--stack", "stacks", multiple=True, help="Stack file(s), merged in order [default: composer.toml]."
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a stack value, e.g. --set stack.port=8001.",
)
@click.version_option(package_name="vllm-variant-composer")
@click.pass_context
def main(ctx: click.Context, env_file: str, stacks: tuple[str, ...], sets: tuple[str, ...]) -> None:
    """Render, build, swap and benchmark vLLM containers behind one port and one served name."""
    ctx.obj = Context(env_file, stacks, sets)


@main.command()
@click.argument("variants", nargs=-1)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 listing files that are stale.")
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Output folder [default: compose/ next to the stack file].",
)
@click.pass_obj
@handle_errors
def render(obj: Context, variants: tuple[str, ...], check: bool, out_dir: str | None) -> None:
    """Write compose/<variant>.yml and compose/<variant>.sh for each variant (all by default)."""
    from composer.render.files import is_current, render_all, write_all

    stack = obj.stack()
    files = render_all(stack, list(variants), Path(out_dir) if out_dir else stack.render_dir)
    if check:
        stale = [f for f in files if not is_current(f)]
        for file in stale:
            click.echo(f"stale: {_shown(file.path)}")
        if stale:
            fail(f"{len(stale)} rendered file(s) are stale: run `compose-spec render`", 1)
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
@handle_errors
def init_cmd(directory: Path, with_env: bool, force: bool) -> None:
    """Write a starter composer.toml and .env.example into DIRECTORY (default: here).

    \b
    Example:
      compose-spec init my-stack --env && cd my-stack && compose-spec render
    """
    from composer.stack.starter import init_stack

    for written in init_stack(directory, with_env=with_env, force=force):
        click.echo(f"wrote: {_shown(written.path)}")
    click.echo("next: edit composer.toml and .env, then `compose-spec render` and `compose-spec doctor`")


@main.command("config")
@click.argument("variant", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def config_cmd(obj: Context, variant: str | None, as_json: bool) -> None:
    """Print the resolved stack and where each value came from (API key masked)."""
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


def _swap(obj: Context, variant_or_workload: str, workload: bool, opts: dict[str, Any]) -> None:
    import signal

    from composer.engine.client import docker_client
    from composer.errors import SwapFailed
    from composer.render.spec import resolve_target
    from composer.swap.swapper import UpOptions, up

    stack = obj.stack()
    variant = stack.workload_variant(variant_or_workload).name if workload else variant_or_workload
    target = resolve_target(stack, variant)
    options = UpOptions(
        timeout=opts["timeout"],
        rollback=not opts["no_rollback"],
        wait_for_lock=not opts["no_wait"],
        allow_weak_key=opts["allow_weak_key"],
        settle=opts["settle"],
    )
    line = LiveLine()
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        result = up(
            stack, target, client=docker_client(), options=options, progress=line.step, waiting=line.waiting
        )
    except SwapFailed as err:
        line.finish()
        if opts["as_json"]:
            outcome = "rolled-back" if err.rolled_back else "failed"
            click.echo(json.dumps({"variant": variant, "outcome": outcome, "error": str(err)}))
        raise
    line.finish()
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if opts["as_json"]:
        click.echo(
            json.dumps({**result.__dict__, "timings": {k: round(v, 3) for k, v in result.timings.items()}})
        )
    else:
        total = result.timings.get("total", 0.0)
        click.echo(f"{variant}: {result.outcome} ({total:.1f}s)")


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
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@main.command()
@click.argument("variant")
@swap_options
@click.pass_obj
@handle_errors
def up(obj: Context, variant: str, **opts: Any) -> None:
    """Swap VARIANT in: stop the old one, start and health-gate the new one, roll back on failure."""
    _swap(obj, variant, False, opts)


@main.command()
@click.argument("workload")
@swap_options
@click.pass_obj
@handle_errors
def use(obj: Context, workload: str, **opts: Any) -> None:
    """Swap to the variant mapped to WORKLOAD in composer.toml ([workloads])."""
    _swap(obj, workload, True, opts)


@main.command()
@click.pass_obj
@handle_errors
def down(obj: Context) -> None:
    """Stop and remove the running variant."""
    from composer.engine.client import docker_client
    from composer.swap.swapper import down as stop

    line = LiveLine()
    stopped = stop(obj.stack(), client=docker_client(), progress=line.step)
    click.echo(f"stopped {stopped}" if stopped else "nothing was running")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def status(obj: Context, as_json: bool) -> None:
    """Show the running variant: health, served name, port, image, uptime."""
    from composer.engine.client import docker_client
    from composer.swap.status import format_status, status_data

    data = status_data(obj.stack(), docker_client())
    click.echo(json.dumps(data, indent=2) if as_json else format_status(data))


@main.command()
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--tail", default=200, show_default=True, help="Lines to show.")
@click.option("--explain", is_flag=True, help="Explain known failure lines with their fixes.")
@click.pass_obj
@handle_errors
def logs(obj: Context, follow: bool, tail: int, explain: bool) -> None:
    """Print the newest variant container's log (running or exited)."""
    from composer.engine.bootlog import redact
    from composer.engine.client import docker_client
    from composer.engine.containers import our_containers
    from composer.engine.diagnose import explain as find_signatures

    stack = obj.stack()
    containers = our_containers(stack, docker_client())
    if not containers:
        fail("no variant container exists (start one with `compose-spec up VARIANT`)", 1)
    container = containers[0]
    if follow and not explain:
        for chunk in container.follow(tail):
            click.echo(redact(chunk, stack.api_key), nl=False)
        return
    text = redact(container.log(tail=tail), stack.api_key)
    if not explain:
        click.echo(text, nl=False)
        return
    found = find_signatures(text)
    if not found:
        click.echo("no known failure signature in the log")
    for signature in found:
        click.echo(f"{signature.name}: {signature.explanation}\n  fix: {signature.fix}")


@main.command("build")
@click.argument("recipe")
@click.option("--dry-run", is_flag=True, help="Validate and apply the diffs against the base; build nothing.")
@click.option("--pin", is_flag=True, help="Record the diffs' current sha256 in image.toml, then build.")
@click.option("--force", is_flag=True, help="Rebuild even when the image already records the same inputs.")
@click.option(
    "--recipes-dir", default="images", show_default=True, type=click.Path(file_okay=False), hidden=True
)
@click.pass_obj
@handle_errors
def build_cmd(obj: Context, recipe: str, dry_run: bool, pin: bool, force: bool, recipes_dir: str) -> None:
    """Build the overlay image of images/RECIPE offline (base must be local; never pulls)."""
    from composer.engine.client import docker_client
    from composer.overlay.builder import build_overlay
    from composer.overlay.recipe import load_recipe

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
        )
    finally:
        client.close()
    summary = {"built": "built", "current": "up to date", "dry-run": "dry run passed, nothing built"}
    click.echo(f"{result.tag}: {summary[result.status]}")


@main.command()
@click.argument("variant", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema 1).")
@click.pass_obj
@handle_errors
def doctor(obj: Context, variant: str | None, as_json: bool) -> None:
    """Check the host, Docker, GPUs, checkpoints and secrets for VARIANT (all by default)."""
    from composer.doctor.report import default_host, format_report, run_doctor

    report = run_doctor(obj.stack(), variant, default_host(obj.env_file))
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else format_report(report))
    if report.failed:
        sys.exit(1)


def _csv_list(value: str | None, convert: Callable[[str], Any] = str) -> tuple[Any, ...] | None:
    """`a,b,c` -> a tuple (None when not given); BadParameter on a bad item."""
    if not value:
        return None
    try:
        return tuple(convert(item.strip()) for item in value.split(",") if item.strip())
    except ValueError as err:
        raise click.BadParameter(f"{value!r}: {err}") from err


@main.command()
@click.option("--variants", help="Comma-separated variants to measure [default: all in the stack].")
@click.option("--k", "ks", help="Comma-separated K values for speculative variants [default: 1,3,4,7,10].")
@click.option("--prompt-file", type=click.Path(dir_okay=False), help="Prompts separated by lines of `---`.")
@click.option("--prompt-tokens", type=int, help="Pad the built-in prompts to about N tokens.")
@click.option("--max-tokens", default=512, show_default=True, help="Tokens generated per request.")
@click.option("--runs", default=5, show_default=True, help="Measured requests per point (median).")
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
@click.pass_obj
@handle_errors
def bench(
    obj: Context,
    variants: str | None,
    ks: str | None,
    prompt_file: str | None,
    prompt_tokens: int | None,
    max_tokens: int,
    runs: int,
    warmup: int,
    out_dir: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Measure warm decode speed, acceptance and correctness per variant and K; restore after."""
    import signal

    from composer.bench.prompts import bench_prompts
    from composer.bench.report import format_table, report_data, write_outputs
    from composer.bench.swaps import bench_with_swaps
    from composer.bench.sweep import BenchOptions
    from composer.engine.client import docker_client

    options = BenchOptions(
        prompts=bench_prompts(prompt_file, prompt_tokens),
        max_tokens=max_tokens,
        runs=runs,
        warmup=warmup,
        request_timeout=timeout,
    )
    names = _csv_list(variants) or tuple(obj.stack().variants)
    k_values = _csv_list(ks, int)
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
        )
    finally:
        client.close()
    written = write_outputs(report, Path(out_dir))
    click.echo(json.dumps(report_data(report), indent=2) if as_json else format_table(report))
    click.echo("wrote: " + ", ".join(str(p) for p in written), err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
