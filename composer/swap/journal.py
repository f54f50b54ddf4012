"""What a swap leaves in the project's state folder: the running swap's record, the history.

`swap.json` names the swap that holds the project's lock (pid, from, to, steps, stage, times),
written atomically at every stage and removed at the end: `status` reads it instead of
waiting on a held request; one whose process is gone becomes an `interrupted` event.
`history.jsonl` gets one JSON line per `up`, `down`, wake and rollback, trimmed to the newest
`HISTORY_LINES`. `shown.json` remembers (as digests) the lines about the stack already shown to
the user, so that a warning about it is said once, not on every swap. All are written from data,
never the stack's variants, and never hold the API key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer.errors import ComposerError
from composer.render.runfiles import state_dir
from composer.stack.bounded import HISTORY_LIMIT, KIB, RECORD_LIMIT, read_bounded, replace_file
from composer.swap.lock import swap_lock

HISTORY_LINES = 1000
TRIM_BYTES = HISTORY_LINES * 400  # past this size the history is cut to its newest lines
RUNNING = "swap.json"
HISTORY = "history.jsonl"
SHOWN = "shown.json"
SHOWN_LINES = 200  # the newest lines remembered as shown
WARNING, NOTE = "warning: ", "note: "
"""How a line about the stack starts when a swap says it (`ctx.say`) before it changes anything."""
INTERRUPTED = "interrupted"


def project_dir(project: str, directory: Path | None = None) -> Path:
    """The project's state folder (run files, the running swap, the history)."""
    return (directory or state_dir()) / project


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, data, 0o600)


def process_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks after boot, field 22 of /proc/PID/stat): with
    the pid it names one process, even after the pid is reused. None: no such process."""
    try:
        data = read_bounded(f"/proc/{pid}/stat", "process status", 4 * KIB)
    except (OSError, ComposerError):
        return None
    fields = data.rpartition(b")")[2].split()  # the name in parentheses may hold anything
    if fields[:1] == [b"Z"]:  # a zombie has ended (its parent has not collected it yet)
        return None
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else None


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
    pid_start: str | None = None  # `process_start(pid)` when the record was written
    kind: str = "up"  # `live`: a live set's change (source and target are sets, `a+b`); `down`
    until: float | None = None  # epoch seconds: the end of the probation its watcher runs

    def line(self, now: float | None = None) -> str:
        """`swapping baseline -> mtp (pid 1234): loading 13 s of 900 s` (`changing the live set ...`);
        a probation's: `mtp serves, on probation until 07:12:03 (pid 1234): a crash rolls it back
        to baseline`."""
        now = time.time() if now is None else now
        if self.until is not None:
            back = f"rolls it back to {self.source}" if self.source else "stops it"
            until = time.strftime("%H:%M:%S", time.localtime(self.until))
            watched = f"{self.target} serves, on probation until {until} (pid {self.pid})"
            return f"{watched}: a crash or a restart {back}"
        took = max(0.0, now - self.started)
        source = self.source or "nothing"
        what = {"live": "changing the live set ", "down": "stopping "}.get(self.kind, "swapping ")
        change = f"{source}" if self.kind == "down" else f"{source} -> {self.target}"
        return f"{what}{change} (pid {self.pid}): {self.stage} {took:.0f} s of {self.timeout:.0f} s"

    def alive(self) -> bool:
        """True while the process that wrote the record runs: the same pid, started at the
        same time (a reused pid started later; a record without a start time is an old one)."""
        if not Path("/proc").is_dir():
            return _signal_zero(self.pid)
        return self.pid_start is not None and process_start(self.pid) == self.pid_start

    def interrupted(self) -> dict[str, Any]:
        """The history event of a swap whose process ended without finishing it."""
        return {
            "time": self.stage_started,
            "kind": self.kind,
            "source": self.source,
            "target": self.target,
            "outcome": INTERRUPTED,
            "steps": list(self.steps),
            "cause": f"its process (pid {self.pid}) ended during the {self.stage} stage without finishing "
            "the swap (killed?); `compose-spec status` shows what runs now",
        }


class SwapRecord:
    """Writes the running swap's record (the plan's data, pid, stage, times) at every stage and
    removes it at the end; made under the lock, after a dead swap's record is reaped."""

    def __init__(self, project: str, plan: Mapping[str, Any], timeout: float) -> None:
        self.path = project_dir(project) / RUNNING
        _reap(project)
        self.entry = {
            "source": plan.get("serving"),
            "target": plan.get("target"),
            "steps": list(plan.get("steps") or ()),
            "kind": str(plan.get("kind") or "up"),
            "started": time.time(),
            "timeout": timeout,
            "pid": os.getpid(),
            "pid_start": process_start(os.getpid()),
        }
        self.handed = False  # a watcher process goes on with it (`hand_over`)

    def stage(self, name: str) -> None:
        """Record the stage the swap is in now (never fails the swap)."""
        record = {**self.entry, "stage": name, "stage_started": time.time()}
        with contextlib.suppress(OSError):
            _write_atomic(self.path, json.dumps(record).encode())

    def hand_over(self, stage: str, until: float | None = None) -> None:
        """In a forked watcher: the record names this process now, at `stage` (until `until`)."""
        self.entry |= {"pid": os.getpid(), "pid_start": process_start(os.getpid()), "until": until}
        self.stage(stage)

    def close(self) -> None:
        if self.handed:  # the watcher that goes on with the swap removes it
            return
        with contextlib.suppress(OSError):
            self.path.unlink()


def _signal_zero(pid: int) -> bool:
    try:
        with contextlib.suppress(PermissionError):  # another user's process: it runs
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _record(path: Path) -> RunningSwap | None:
    """The swap record at `path`; None when there is none or it is not one a swap wrote."""
    try:
        data = json.loads(read_bounded(path, "swap record", RECORD_LIMIT))
        record = RunningSwap(
            pid=int(data["pid"]),
            source=data.get("source"),
            target=str(data["target"]),
            stage=str(data["stage"]),
            started=float(data["started"]),
            stage_started=float(data.get("stage_started", data["started"])),
            timeout=float(data["timeout"]),
            steps=tuple(str(s) for s in data.get("steps") or ()),
            pid_start=str(data["pid_start"]) if data.get("pid_start") is not None else None,
            kind=data["kind"] if data.get("kind") in ("live", "down") else "up",
            until=float(data["until"]) if data.get("until") is not None else None,
        )
    except (OSError, ValueError, KeyError, TypeError, RecursionError, ComposerError):
        return None
    numbers = (record.started, record.stage_started, record.timeout, record.until or 0.0)
    if record.pid <= 0 or not all(math.isfinite(n) for n in numbers):
        return None
    return record


def _reap(project: str) -> None:
    """Turn a dead swap's record into an `interrupted` history event (with the lock held)."""
    path = project_dir(project) / RUNNING
    record = _record(path)
    if record is None or record.alive():
        return
    append_history(project, record.interrupted())
    with contextlib.suppress(OSError):
        path.unlink()


def running_swap(project: str) -> RunningSwap | None:
    """The swap running now for `project`, if its record names a live process; a dead one's record
    becomes an `interrupted` event, under the lock taken without waiting (else left alone)."""
    record = _record(project_dir(project) / RUNNING)
    if record is None or record.alive():
        return record
    with contextlib.suppress(ComposerError, OSError), swap_lock(project, wait=False):
        _reap(project)
    return None


def append_history(project: str, entry: dict[str, Any]) -> None:
    """Append one event (time added) to the project's history, keeping the newest lines; never fails
    (a full disk or a corrupt history lose the event, not the swap)."""
    path = project_dir(project) / HISTORY
    line = json.dumps({"time": round(time.time(), 3), **entry}, sort_keys=True)
    with contextlib.suppress(OSError, ValueError, ComposerError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as handle:
            handle.write(line.encode() + b"\n")
        if path.stat().st_size > TRIM_BYTES:
            kept = read_bounded(path, "swap history", TRIM_BYTES, tail=True).splitlines()[1:]
            _write_atomic(path, b"\n".join(kept[-HISTORY_LINES:]) + b"\n")


@dataclass(frozen=True)
class History:
    """The events of a project's history (oldest first) and how many lines were unreadable."""

    events: list[dict[str, Any]]
    skipped: int
    path: Path


def read_history(project: str, last: int | None = None) -> History:
    """The project's history, oldest first (the last `last` events); lines that are not an event
    are skipped and counted. A killed swap's record is first turned into its event."""
    running_swap(project)
    path = project_dir(project) / HISTORY
    try:
        lines = read_bounded(path, "swap history", HISTORY_LIMIT, tail=True).splitlines()
    except FileNotFoundError:
        return History([], 0, path)
    except OSError as err:
        raise ComposerError(f"cannot read the swap history {path}: {err.strerror or err}") from err
    events = [event for event in map(_event, lines) if event is not None]
    skipped = sum(1 for line in lines if line.strip()) - len(events)
    return History(events[-last:] if last else events, skipped, path)


_TEXT_FIELDS = ("kind", "outcome", "source", "target", "cause")


def _event(line: bytes) -> dict[str, Any] | None:
    """One history line as an event, or None when it is not one."""
    try:
        event = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict):
        return None
    moment = event.get("time")
    if isinstance(moment, bool) or not isinstance(moment, int | float) or not 0 <= moment < 1e11:
        return None
    if any(event.get(name) is not None and not isinstance(event[name], str) for name in _TEXT_FIELDS):
        return None
    timings, drained = event.get("timings"), event.get("drained")
    if not isinstance(timings, dict | None) or not isinstance(drained, dict | None):
        return None
    if drained and not all(isinstance(drained.get(name, 0), int) for name in ("cut", "continued", "refused")):
        return None
    return event


def first_time(project: str, line: str) -> bool:
    """True when `line` (a warning about the stack) was never shown for `project`, which
    remembers it as shown from now on; never fails (a line it cannot remember is shown)."""
    path = project_dir(project) / SHOWN
    digest = hashlib.sha256(line.encode()).hexdigest()[:24]
    try:
        shown = json.loads(read_bounded(path, "shown lines", RECORD_LIMIT))
        shown = [str(d) for d in shown] if isinstance(shown, list) else []
    except (OSError, ValueError, RecursionError, ComposerError):
        shown = []
    if digest in shown:
        return False
    with contextlib.suppress(OSError):
        _write_atomic(path, json.dumps([*shown, digest][-SHOWN_LINES:]).encode())
    return True
