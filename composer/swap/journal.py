"""What a swap leaves on disk: the record of the swap running now, and the swap history.

Both live in the project's state folder (`$XDG_STATE_HOME/vllm-composer/<project>/`, beside
the run files), and both are written from data: the plan's (`SwapPlan.as_data()`) and the
result's, never the stack's variant objects. `swap.json` names the swap that holds the
project's lock (pid, from, to, the plan's steps, stage, start time, timeout): `status` reads
it instead of waiting on a held request.
It is written atomically at every stage and removed when the swap ends; a record whose
pid is gone is ignored. `history.jsonl` gets one JSON line per `up`, `down`, wake and
rollback (time, from, to, outcome, timings, drained/cut, cause), trimmed to the newest
`HISTORY_LINES` lines. Neither ever holds the API key.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer.render.runfiles import state_dir

HISTORY_LINES = 1000
RUNNING = "swap.json"
HISTORY = "history.jsonl"


def project_dir(project: str, directory: Path | None = None) -> Path:
    """The project's state folder (run files, the running swap, the history)."""
    return (directory or state_dir()) / project


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class RunningSwap:
    """The swap that holds the project's lock now."""

    pid: int
    source: str | None
    target: str
    stage: str
    started: float  # epoch seconds
    stage_started: float
    timeout: float
    steps: tuple[str, ...] = ()  # the plan's steps

    def line(self, now: float | None = None) -> str:
        """`swapping baseline -> mtp (pid 1234): loading 13 s of 900 s`."""
        now = time.time() if now is None else now
        took = max(0.0, now - self.started)
        source = self.source or "nothing"
        return (
            f"swapping {source} -> {self.target} (pid {self.pid}): {self.stage} "
            f"{took:.0f} s of {self.timeout:.0f} s"
        )


class SwapRecord:
    """Writes the running swap's record at every stage; removes it at the end.

    It records the plan as data (`SwapPlan.as_data()`: from `serving` to `target`, its
    steps) beside the pid, the stage and the times; `running_swap` reads it back."""

    def __init__(
        self, project: str, plan: Mapping[str, Any], timeout: float, directory: Path | None = None
    ) -> None:
        self.path = project_dir(project, directory) / RUNNING
        self.entry = {
            "source": plan.get("serving"),
            "target": plan.get("target"),
            "steps": list(plan.get("steps") or ()),
            "started": time.time(),
            "timeout": timeout,
        }

    def stage(self, name: str) -> None:
        """Record the stage the swap is in now (never fails the swap)."""
        record = {**self.entry, "pid": os.getpid(), "stage": name, "stage_started": time.time()}
        with contextlib.suppress(OSError):
            _write_atomic(self.path, json.dumps(record))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").is_dir() if Path("/proc").is_dir() else _signal_zero(pid)


def _signal_zero(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_swap(project: str, directory: Path | None = None) -> RunningSwap | None:
    """The swap running now for `project`, if its record names a live process."""
    try:
        data = json.loads((project_dir(project, directory) / RUNNING).read_text(encoding="utf-8"))
        record = RunningSwap(
            pid=int(data["pid"]),
            source=data.get("source"),
            target=str(data["target"]),
            stage=str(data["stage"]),
            started=float(data["started"]),
            stage_started=float(data.get("stage_started", data["started"])),
            timeout=float(data["timeout"]),
            steps=tuple(str(s) for s in data.get("steps") or ()),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if _alive(record.pid) else None


def append_history(project: str, entry: dict[str, Any], directory: Path | None = None) -> None:
    """Append one event (time added) to the project's history; keep the newest lines only."""
    path = project_dir(project, directory) / HISTORY
    line = json.dumps({"time": round(time.time(), 3), **entry}, sort_keys=True)
    with contextlib.suppress(OSError):  # the history never fails a swap
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        if path.stat().st_size > HISTORY_LINES * 400:
            kept = path.read_text(encoding="utf-8").splitlines()[-HISTORY_LINES:]
            _write_atomic(path, "\n".join(kept) + "\n")


def read_history(
    project: str, last: int | None = None, directory: Path | None = None
) -> list[dict[str, Any]]:
    """The project's history, oldest first (the last `last` events); unreadable lines skipped."""
    try:
        lines = (project_dir(project, directory) / HISTORY).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict):
                events.append(event)
    return events[-last:] if last else events


def format_history(events: list[dict[str, Any]]) -> str:
    """One line per event: time, kind, from -> to, outcome, total seconds, cut, cause."""
    if not events:
        return "no swaps recorded yet"
    rows = []
    for event in events:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(event.get("time", 0))))
        total = (event.get("timings") or {}).get("total")
        took = f" {total:.1f}s" if isinstance(total, int | float) else ""
        drained = event.get("drained") or {}
        cut = f", {drained['cut']} cut" if drained.get("cut") else ""
        cause = f": {event['cause']}" if event.get("cause") else ""
        route = f"{event.get('source') or '-'} -> {event.get('target') or '-'}"
        kind, outcome = event.get("kind", "up"), event.get("outcome", "?")
        rows.append(f"{when}  {kind:<8} {route}  {outcome}{took}{cut}{cause}")
    return "\n".join(rows)
