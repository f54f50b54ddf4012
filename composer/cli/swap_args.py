"""The options of `up` and `use`, and how a swap's outcome is printed (one swap or a live set,
on Docker or Kubernetes)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from composer.cli.context import Context
from composer.cli.output import LiveLine, note, warning
from composer.errors import SwapFailed


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
    profiles: tuple[str, ...] = ()

    def up_options(self, obj: Context, probation: float = 0.0):
        from composer.swap.swapper import UpOptions

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
            profiles=self.profiles,
            env_file=os.path.abspath(obj.options.env_file),
            stack_files=tuple(os.path.abspath(p) for p in obj.source.stack_files()),
        )

    def weak_key_allowed(self, obj: Context) -> bool:
        """`--allow-weak-key` given to the command or as the global option."""
        return self.allow_weak_key or obj.options.allow_weak_key


def _port_gap(result: Any) -> str:
    """`; the port refused 31 of 96 probes over 0.62 s (...)` when the gateway's container was replaced."""
    from composer.engine.port_gap import describe

    gap = getattr(result, "port_gap", None)
    return f"; {describe(gap)}" if isinstance(gap, dict) else ""


def report_swap(
    variant: str, as_json: bool, run: Callable[[LiveLine], Any], where: str = "", dry_run: bool = False
) -> None:
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
    for text in getattr(result, "warnings", ()):
        warning(text)
    for text in result.notes:
        note(text)
    if as_json:
        timings = {k: round(v, 3) for k, v in result.timings.items()}
        click.echo(json.dumps({**result.__dict__, "timings": timings}))
    elif dry_run:
        click.echo(getattr(result, "plan_text", None) or f"{variant}: {result.outcome}")
    else:
        total = result.timings.get("total", 0.0)
        click.echo(f"{variant}: {result.outcome}{where} ({total:.1f}s){_port_gap(result)}")
    if dry_run and result.outcome == "refused":
        raise SystemExit(2)  # the plan was printed; `up` itself would refuse it (a usage error)
