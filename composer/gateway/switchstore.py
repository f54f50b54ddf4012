"""The finished switches on disk, so that a restarted gateway still shows its history.

One JSON object per line (oldest first) in `<GATEWAY_STATE_DIR>/switches.jsonl`, at most
`keep` lines, rewritten whole and atomically (a temporary file beside it, fsync, rename)
after each switch. A missing, unreadable or partly corrupt file loses only what cannot be
read; a failed write is logged and never stops the gateway.
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
MAX_LINE_BYTES = 16384  # a longer line is not one this gateway wrote


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
        tmp = None
        try:
            with tempfile.NamedTemporaryFile(
                "w", dir=self.path.parent, prefix=".switches-", suffix=".tmp", delete=False, encoding="utf-8"
            ) as out:
                tmp = out.name
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
            tmp = None
        except OSError as err:
            log.warning("status: cannot save the switch history to %s: %s", self.path, err)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
