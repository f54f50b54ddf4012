"""What a restarted gateway keeps in its state folder: finished switches, live settings and
what serves.

Switches: one JSON object per line (oldest first) in `<GATEWAY_STATE_DIR>/switches.jsonl`, at
most `keep` lines, rewritten whole after each switch. Settings: `settings.json`, the settings
applied in place (`PUT /settings`) with the container they were applied to, so that a restart
of the same container keeps them and a new container (other settings) starts from its own.
What serves: `serving.json`, the members (live set, single member with its variant, the set's
generation) with the container that wrote it, marked `stopped` when that gateway stopped: a
restart of the same container takes it whole, a new container started beside a running one
(a replacement) only the single member's variant, one started after a stop (`down`, then
`up`) nothing (`ServingStore`).
Every write is atomic (a temporary file beside it, fsync, rename). A missing, unreadable or
partly corrupt file loses only what cannot be read; a failed write is logged and never stops
the gateway.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("gateway")

FILE_NAME = "switches.jsonl"
SETTINGS_FILE = "settings.json"
SERVING_FILE = "serving.json"
MAX_LINE_BYTES = 16384  # a longer line is not one this gateway wrote
MAX_SETTINGS_BYTES = 65536


class SwitchStore:
    """Load and save the history of finished switches (newest first in memory)."""

    def __init__(self, directory: str | Path, keep: int) -> None:
        self.path = Path(directory) / FILE_NAME
        self.keep = keep

    def load(self) -> list[dict[str, Any]]:
        """The saved switches, newest first (empty when there are none or none can be read)."""
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        except OSError as err:
            log.warning("status: cannot read the switch history %s: %s", self.path, err)
            return []
        records = []
        for line in lines[-self.keep :]:
            if len(line) > MAX_LINE_BYTES:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("to"), str):
                records.append(record)
        return records[::-1]

    def save(self, newest_first: list[dict[str, Any]]) -> None:
        """Replace the file with these switches (the newest `keep`), atomically."""
        body = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in newest_first[: self.keep][::-1])
        write_atomic(self.path, body, "the switch history")


class SettingsStore:
    """The settings applied in place to one container (`container`: `runtime.container_instance`)."""

    def __init__(self, directory: str | Path, container: str) -> None:
        self.path = Path(directory) / SETTINGS_FILE
        self.container = container

    def load(self, started_with: dict[str, str]) -> dict[str, str]:
        """The settings saved by this container started with these ones ({} when none)."""
        record = read_record(self.path, "settings")
        if record.get("container") != self.container:
            return {}  # another container's: this one starts from its own environment
        if record.get("started_with") != started_with or not isinstance(record.get("settings"), dict):
            return {}
        return {str(k): str(v) for k, v in record["settings"].items()}

    def save(self, started_with: dict[str, str], settings: dict[str, str]) -> None:
        """Keep `settings` for a restart of this container."""
        record = {"container": self.container, "started_with": started_with, "settings": settings}
        write_atomic(self.path, json.dumps(record, separators=(",", ":")), "the settings")


class ServingStore:
    """What serves (`live.LiveSet.record()`), kept for a restart or a replacement."""

    def __init__(self, directory: str | Path, container: str) -> None:
        self.path = Path(directory) / SERVING_FILE
        self.container = container

    def _read(self) -> dict[str, Any]:
        record = read_record(self.path, "serving")
        return record if isinstance(record.get("serving"), dict) else {}

    def load(self) -> tuple[dict[str, Any], bool, bool]:
        """The saved record ({} when none can be read), whether this container saved it and
        whether the gateway that saved it stopped."""
        record = self._read()
        if not record:
            return {}, False, False
        return record["serving"], record.get("container") == self.container, record.get("stopped") is True

    def save(self, serving: dict[str, Any], stopped: bool = False) -> None:
        """Keep `serving` (written by this container)."""
        record = {"container": self.container, "serving": serving, "stopped": stopped}
        write_atomic(self.path, json.dumps(record, separators=(",", ":")), "what serves")

    def stopped(self) -> None:
        """This gateway stops: its record says so (not another container's: a replacement's)."""
        record = self._read()
        if record and record.get("container") == self.container:
            self.save(record["serving"], stopped=True)


def read_record(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in `path` (at most `MAX_SETTINGS_BYTES` read); {} when there is none or
    it cannot be read (logged under `what`)."""
    try:
        with path.open("rb") as fh:
            record = json.loads(fh.read(MAX_SETTINGS_BYTES + 1)[:MAX_SETTINGS_BYTES])
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("%s: cannot read %s: %s", what, path, err)
        return {}
    return record if isinstance(record, dict) else {}


def write_atomic(path: Path, body: str, what: str) -> None:
    """Replace `path` with `body` atomically; a failure is logged."""
    tmp = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp", delete=False, encoding="utf-8"
        ) as out:
            tmp = out.name
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        log.warning("status: cannot save %s to %s: %s", what, path, err)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
