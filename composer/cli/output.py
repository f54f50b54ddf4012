"""Printing helpers shared by the commands: the live progress line, notes and warnings."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from composer.swap.outcome import UpResult

STACK_LINES = ("warning: ", "note: ")
"""How a line about the stack starts when a swap says it before it changes anything."""


class LiveLine:
    """Progress output: one rewritten line on a TTY, plain lines on stage changes otherwise.
    An output error (a closed pipe or terminal) silences it; the swap goes on.

    A line about the stack (`STACK_LINES`) is remembered in `said` (the report does not repeat
    it) and shown only when `first_time` says it was not shown for the stack before."""

    def __init__(self, first_time: Callable[[str], bool] | None = None) -> None:
        try:
            self.tty = sys.stderr.isatty()
        except (OSError, ValueError):
            self.tty = False
        self.last = ""
        self.open = False
        self.broken = False
        self.first_time = first_time
        self.said: set[str] = set()

    def _echo(self, message: str, nl: bool = True) -> None:
        if self.broken:
            return
        try:
            click.echo(message, err=True, nl=nl)
        except (OSError, ValueError):  # EPIPE, EIO, a closed stream: stop printing, never raise
            self.broken = True

    def step(self, message: str) -> None:
        prefix = next((p for p in STACK_LINES if message.startswith(p)), None)
        if prefix is not None:
            self.said.add(message.removeprefix(prefix))
            if self.first_time is not None and not self.first_time(message):
                return
        self.finish()
        self._echo(message)

    def waiting(self, message: str) -> None:
        if self.tty:
            self._echo(f"\r\033[K{message}", nl=False)
            self.open = True
            return
        stage = message.split(" (")[0]
        if stage != self.last:
            self._echo(message)
            self.last = stage

    def finish(self) -> None:
        if self.open:
            self._echo("")
            self.open = False


def _to_stderr(text: str) -> None:
    """One line on stderr; a closed stderr (EPIPE, EIO) drops it instead of failing the command."""
    with contextlib.suppress(OSError, ValueError):
        click.echo(text, err=True)


def note(message: str) -> None:
    _to_stderr(f"note: {message}")


def warning(message: str) -> None:
    _to_stderr(f"warning: {message}")


def outcome_line(variant: str, result: UpResult, where: str = "") -> str:
    """`mtp: swapped (switch 7.5s, then 30.0s on probation); in flight: 2 streams continued, 1
    finished, 0 cut`: what changed, the switch's own time (the probation watches a variant that
    already serves), what the requests in flight got, and the port's gap when the gateway's
    container was replaced."""
    from composer.engine.port_gap import describe

    timings = result.timings
    total, probation = timings.get("total", 0.0), timings.get("probation", 0.0)
    took = f"{total:.1f}s"
    if probation:
        took = f"switch {total - probation:.1f}s, then {probation:.1f}s on probation"
    text = f"{variant}: {result.outcome}{where} ({took})"
    if result.drained is not None:
        text += f"; {in_flight(result.drained)}"
    gap = result.port_gap  # the gateway's container was replaced
    text += f"; {describe(gap)}" if gap is not None else ""
    watched = result.probation  # a watcher process goes on with it
    if watched is not None:
        until = datetime.fromisoformat(str(watched["until"])).astimezone().strftime("%H:%M:%S")
        text += f"; on probation until {until} (`compose-spec status` shows it)"
    return text


def in_flight(drained: dict[str, int]) -> str:
    """What the requests in flight at the switch got: `in flight: 2 streams continued, 1
    finished, 0 cut` (`no request was in flight`)."""
    continued, cut = drained.get("continued", 0), drained.get("cut", 0)
    finished = drained.get("finished")  # a live change counts only what it continued or cut
    if finished == 0 and not (continued or cut):
        return "no request was in flight"
    parts = [f"{continued} stream{'' if continued == 1 else 's'} continued"]
    parts += [f"{finished} finished"] if finished is not None else []
    return "in flight: " + ", ".join([*parts, f"{cut} cut"])


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))
