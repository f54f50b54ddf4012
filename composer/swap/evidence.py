"""The evidence of the last failed swap: the failed container's log, kept after it is removed.

Before a failed swap removes its container, its log is saved in the project's state folder
(`last-failure.log`, mode 0600, the API key masked, the last MAX_BYTES) with a JSON record of
what failed and when; `compose-spec logs --failed [--explain]` reads it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine.bootlog import redact
from composer.engine.containers import our_containers
from composer.engine.variant_container import VariantContainer
from composer.stack.bounded import RECORD_LIMIT, FileTooLarge, read_bounded, replace_file
from composer.swap.journal import INTERRUPTED, project_dir

if TYPE_CHECKING:
    import docker

    from composer.stack.model import Stack

MAX_BYTES = 512 * 1024
LOG_FILE = "last-failure.log"
RECORD_FILE = "last-failure.json"


@dataclass(frozen=True)
class Failure:
    """A saved failure: which variant, when (ISO time, UTC), why, and its log."""

    variant: str
    when: str
    cause: str
    log: str
    truncated: bool = False


def save_failure(
    project: str,
    variant: str,
    cause: str,
    log: str,
    api_key: str | None,
    directory: Path | None = None,
) -> Path:
    """Keep a failed container's log (bounded, key masked); return where it went."""
    folder = project_dir(project, directory)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = redact(log, api_key).encode()
    truncated = len(data) > MAX_BYTES
    if truncated:  # its end, from a line start
        data = data[-MAX_BYTES:]
        data = data[data.find(b"\n") + 1 :]
    record = {
        "variant": variant,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cause": redact(cause, api_key),
        "truncated": truncated,
    }
    replace_file(folder / LOG_FILE, data, 0o600)
    replace_file(folder / RECORD_FILE, (json.dumps(record) + "\n").encode(), 0o600)
    return folder / LOG_FILE


def last_failure(project: str, directory: Path | None = None) -> Failure | None:
    """The saved failure of a project, or None when no swap failed (or the record is unreadable)."""
    folder = project_dir(project, directory)
    try:
        record = json.loads(read_bounded(folder / RECORD_FILE, "failure record", RECORD_LIMIT))
        log = read_bounded(folder / LOG_FILE, "failure log", MAX_BYTES, tail=True).decode(errors="replace")
        return Failure(
            str(record["variant"]), str(record["when"]), str(record["cause"]), log, bool(record["truncated"])
        )
    except (OSError, ValueError, KeyError, TypeError, RecursionError, FileTooLarge):
        return None


def keep(
    stack: Stack,
    client: docker.DockerClient,
    variant: str,
    cause: str,
    log_tail: str,
    say: Callable[[str], None],
    container: str | None = None,
    kept: bool = False,
) -> None:
    """Before a failed variant's container is removed: save its whole log, then show the cause and
    its tail (`container`: a live member's name; else the variant's newest container); `kept`:
    it is not removed (--no-rollback)."""
    try:
        if container is not None:
            failed = VariantContainer(client.containers.get(container))
        else:
            failed = next((c for c in our_containers(stack, client) if c.describe().variant == variant), None)
    except Exception:  # Docker itself may be gone: the failure is still reported, without its log
        failed = None
    saved = ""
    if failed is not None:
        try:
            where = save_failure(stack.project, variant, cause, failed.first_run_log(), stack.api_key)
            saved = f" (whole log kept in {where}: compose-spec logs --failed)"
        except OSError as err:  # never hide the failure behind its evidence
            saved = f" (its log could not be kept: {err})"
    if cause == INTERRUPTED:  # the user stopped it: no failure of the variant, no log shown as one
        log_tail = ""
    say(f"{variant} interrupted{saved}" if cause == INTERRUPTED else f"{variant} failed: {cause}")
    if log_tail:
        say(f"--- last log lines of {variant}{saved} ---\n{log_tail.rstrip()}\n--- end of log ---")
    say(f"{variant} is left as it is (--no-rollback), never restarted" if kept else f"removing {variant}")
