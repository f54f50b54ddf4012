"""Parameter types, completions, the options several commands share, and `up`'s and `use`'s
options as one object (`SwapArgs`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.shell_completion import CompletionItem

if TYPE_CHECKING:
    from composer.cli.base import Context

MAX_OPTION_SECONDS = 7 * 24 * 3600
"""The longest duration a command-line option takes (7 days)."""


class Duration(click.ParamType):
    """Seconds, with or without units (`900`, `1.5`, `90s`, `15m`, `1h30m`, `500ms`): positive,
    finite and at most 7 days (`nan`, `inf`, `0`, `-1`, `1e400` are usage errors)."""

    name = "duration"

    def __init__(self, zero: bool = False) -> None:
        self.zero = zero  # `0` is allowed (`down -t 0`: cut at once)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from composer.stack.values import SECONDS_HELP, format_seconds, parse_seconds

        least = "0 or more" if self.zero else "more than 0"
        allowed = f"{SECONDS_HELP}; {least} and at most {format_seconds(MAX_OPTION_SECONDS)} (7 days)"
        try:
            seconds = parse_seconds(value)
        except (ValueError, OverflowError):
            seconds = -1.0
        too_small = seconds < 0 if self.zero else seconds <= 0
        if too_small or seconds > MAX_OPTION_SECONDS:
            self.fail(f"{value!r}: expected {allowed}", param, ctx)
        return seconds


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


def csv_list(value: str | None, convert: Callable[[str], Any] = str) -> tuple[Any, ...] | None:
    """`a,b,c` -> a tuple (None when not given); BadParameter on a bad item."""
    if not value:
        return None
    try:
        return tuple(convert(item.strip()) for item in value.split(",") if item.strip())
    except ValueError as err:
        raise click.BadParameter(f"{value!r}: {err}") from err


def complete_from_stack(kind: str) -> Callable[[click.Context, click.Parameter, str], list[CompletionItem]]:
    """Shell completion of variant, workload or log-service names from the stack the global
    options name (wherever they stand on the line)."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        from composer.cli.globals import options_of

        try:
            stack = options_of(ctx).source().load()
        except Exception:  # completion never fails loudly
            return []
        if kind == "variant":
            names = list(stack.variants)
        elif kind == "workload":
            names = list(stack.workloads)
        else:
            from composer.swap.service_logs import log_sources

            names = log_sources(stack)
        return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]

    return complete


def complete_recipe(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of the image recipes under --recipes-dir (default images/)."""
    from composer.overlay.recipe import recipe_names

    folder = Path(ctx.params.get("recipes_dir") or "images")
    return [CompletionItem(n) for n in recipe_names(folder) if n.startswith(incomplete)]


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]  # an option: it adds itself to a command


def json_option(help_text: str = "Print JSON.") -> Decorator:
    """`--json` (stored as `as_json`)."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


target_option = click.option(
    "--target",
    type=click.Choice(("compose", "kubernetes")),
    default="compose",
    show_default=True,
    help="Docker Compose on this engine, or Kubernetes manifests and rollouts.",
)


def duration_option(name: str, default: str, help_text: str) -> Decorator:
    """A duration option (`15m`, `1s`, seconds) with its default shown in --help."""
    return click.option(name, type=Duration(), default=default, show_default=True, help=help_text)


settle_option = duration_option("--settle", "1s", "How long to keep watching after readiness.")


def swap_options(func: Callable[..., Any], without: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Options shared by `up`, `use` and `restart` (read into `SwapArgs`), less the flags `without`."""
    options = [
        duration_option("--timeout", "15m", "How long to wait for readiness."),
        click.option("--no-rollback", is_flag=True, help="On failure, do not restart the previous variant."),
        settle_option,
        click.option("--no-wait", is_flag=True, help="Fail instead of waiting when another swap runs."),
        click.option(
            "--allow-weak-key", is_flag=True, help="Accept a weak or short VLLM_API_KEY (a warning instead)."
        ),
        json_option("Print the result (or the error) as JSON."),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Print the plan (steps, rollback, gateway update); change nothing.",
        ),
        click.option(
            "--takeover",
            is_flag=True,
            help="Replace or join variants another stack started in this project (refused otherwise: "
            "their labels name that stack).",
        ),
        click.option(
            "--force-recreate",
            is_flag=True,
            help="Restart the variant even when it serves with this configuration; the gateway "
            "holds requests meanwhile and the old container comes back if the new one fails.",
        ),
        click.option(
            "--wait-probation",
            is_flag=True,
            help="Return when the probation after a switch (stack.probation) ended, with its "
            "outcome, instead of when the new variant serves (a watcher process then keeps it).",
        ),
        click.option(
            "--drain",
            is_flag=True,
            help="Let every request in flight finish on the old variant (up to drain_timeout), "
            "streams too, instead of continuing eligible streams on the new one.",
        ),
    ]
    for option in reversed(options):
        made = option(lambda: None)
        if not any(flag in without for p in getattr(made, "__click_params__", ()) for flag in p.opts):
            func = option(func)
    return func


@dataclass(frozen=True)
class SwapArgs:
    """The options of `up` and `use`."""

    timeout: float
    no_rollback: bool
    settle: float
    no_wait: bool
    allow_weak_key: bool
    as_json: bool
    dry_run: bool = False
    takeover: bool = False
    force_recreate: bool = False
    drain: bool = False
    wait_probation: bool = False
    profiles: tuple[str, ...] = ()

    def up_options(self, obj: Context, probation: float = 0.0):
        from composer.swap.outcome import UpOptions

        return UpOptions(
            timeout=self.timeout,
            rollback=not self.no_rollback,
            wait_for_lock=not self.no_wait,
            allow_weak_key=self.weak_key_allowed(obj),
            settle=self.settle,
            probation=probation,
            dry_run=self.dry_run,
            takeover=self.takeover,
            force_recreate=self.force_recreate,
            drain=self.drain,
            wait_probation=self.wait_probation,
            profiles=self.profiles,
            env_file=os.path.abspath(obj.options.env_file),
            stack_files=tuple(os.path.abspath(p) for p in obj.source.stack_files()),
        )

    def weak_key_allowed(self, obj: Context) -> bool:
        """`--allow-weak-key` given to the command or as the global option."""
        return self.allow_weak_key or obj.options.allow_weak_key
