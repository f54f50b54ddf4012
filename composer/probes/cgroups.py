"""The host PIDs of a container's processes, read from `/proc/<pid>/cgroup` (read-only).

Docker puts a container's processes in a cgroup whose path holds its full id (systemd or
cgroupfs driver, rootless too); `/proc` needs no Docker call and gives host PIDs, the ones
NVML reports. An empty set: not visible from here (Docker in a VM, a PID namespace).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
MIN_ID_LENGTH = 12  # shorter ids could match unrelated cgroup paths


def container_pids(container_ids: Iterable[str], proc: Path = PROC) -> frozenset[int]:
    """PIDs whose cgroup path names one of `container_ids` (full ids; short ones are ignored)."""
    ids = tuple(i for i in container_ids if len(i) >= MIN_ID_LENGTH)
    if not ids:
        return frozenset()
    found: set[int] = set()
    try:
        entries = list(proc.iterdir())
    except OSError:
        return frozenset()
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:  # the process ended, or we may not read it
            continue
        paths = [line.split(":", 2)[-1] for line in text.splitlines()]  # hierarchy:controllers:path
        if any(i in path for path in paths for i in ids):
            found.add(int(entry.name))
    return frozenset(found)
