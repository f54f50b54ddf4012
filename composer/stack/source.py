"""Where a stack comes from (`StackSource`): its files, the env file, `--set` flags and a
project name; the command line resolves its global options into one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from composer.stack.files import DEFAULT_ENV_FILE, find_stack_files, read_dotenv
from composer.stack.load import load_stack
from composer.stack.model import Stack

PROJECT_KEY = "stack.project"


@dataclass(frozen=True)
class StackSource:
    """A stack's inputs: files (empty: COMPOSER_STACK or composer.toml), env file, flags, `-p` name."""

    files: tuple[str, ...] = ()
    env_file: str = DEFAULT_ENV_FILE
    sets: tuple[str, ...] = ()
    project_name: str | None = None

    def load(self, extra_sets: Sequence[str] = ()) -> Stack:
        """The stack with every input applied (and `extra_sets` over the flags)."""
        flags = [*self.sets, *extra_sets]
        labels = {}
        if self.project_name is not None:
            flags.append(f"{PROJECT_KEY}={self.project_name}")
            labels[PROJECT_KEY] = "flag -p"
        stack = load_stack(self.files or None, self.env_file, flags=flags, flag_labels=labels)
        return replace(stack, owner_file=str(self.first_file().resolve()))

    def load_alone(self) -> Stack:
        """The stack from its files alone (what the committed compose/ files are rendered from)."""
        return load_stack(self.stack_files(), None, environ={})

    def stack_files(self) -> list[Path]:
        dotenv, _ = read_dotenv(self.env_file)
        return find_stack_files(self.files or None, os.environ, dotenv)

    def first_file(self) -> Path:
        """The first stack file (the one `recommend --write` edits)."""
        return self.stack_files()[0]
