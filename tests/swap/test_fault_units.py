"""Pure tests for fault handling: detached children, removal in progress, the lock, pruning."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from composer.engine.client import run_detached


def test_children_run_in_their_own_session():
    done = run_detached([sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0))"], None, 10)
    session, group = (int(x) for x in done.stdout.split())
    assert session != os.getsid(0) and group != os.getpgid(0)


def test_timeout_kills_the_child_and_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    began = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_detached(["sh", "-c", script], None, 0.5)
    assert time.monotonic() - began < 5
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{grandchild}").exists() and _state(grandchild) != "Z":
        assert time.monotonic() < deadline, "the grandchild survived the timeout"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
