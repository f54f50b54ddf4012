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

from composer.errors import ComposerError


class Context:
    """Global options shared by every command."""

    def __init__(self, env_file: str, stacks: tuple[str, ...], sets: tuple[str, ...]) -> None:
        self.env_file = env_file
        self.stacks = stacks
        self.sets = sets

    def stack(self, extra_sets: tuple[str, ...] = ()):
        from composer.config import load_stack

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
        except ComposerError as err:
            details = getattr(err, "log_tail", "")
            if details:
                click.echo(details.rstrip(), err=True)
            for hint in getattr(err, "hints", ()):
                click.echo(f"hint: {hint}", err=True)
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
@click.option("--out", "out_dir", default="compose", show_default=True, type=click.Path(file_okay=False))
@click.pass_obj
@handle_errors
def render(obj: Context, variants: tuple[str, ...], check: bool, out_dir: str) -> None:
    """Write compose/<variant>.yml and compose/<variant>.sh for each variant (all by default)."""
    from composer.render import is_current, render_all, write_atomic

    files = render_all(obj.stack(), list(variants), Path(out_dir))
    if check:
        stale = [f for f in files if not is_current(f)]
        for file in stale:
            click.echo(f"stale: {file.path}")
        if stale:
            fail(f"{len(stale)} rendered file(s) are stale: run `compose-spec render`", 1)
        click.echo(f"{len(files)} rendered file(s) are current")
        return
    for file in files:
        click.echo(f"{'wrote' if write_atomic(file) else 'unchanged'}: {file.path}")


@main.command("config")
@click.argument("variant", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
@handle_errors
def config_cmd(obj: Context, variant: str | None, as_json: bool) -> None:
    """Print the resolved stack and where each value came from (API key masked)."""
    from composer.describe import format_stack, stack_data

    data = stack_data(obj.stack(), variant)
    click.echo(json.dumps(data, indent=2) if as_json else format_stack(data))


if __name__ == "__main__":  # pragma: no cover
    main()
