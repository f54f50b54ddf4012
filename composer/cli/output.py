"""Printing helpers shared by the commands: the live progress line and paths as shown."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


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


def shown(path: Path) -> Path:
    """A path relative to the working directory when it lies below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def note(message: str) -> None:
    click.echo(f"note: {message}", err=True)


def warning(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def echo_json(data: Any, indent: int | None = 2) -> None:
    click.echo(json.dumps(data, indent=indent))
