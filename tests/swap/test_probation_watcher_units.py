"""The probation in the background, without Docker: the swap lock handed to a forked watcher,
the running record that names it (what `status` and the history say), `up`'s last line, and
the next change ending a running probation first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from composer.cli.output import outcome_line
from composer.cli.status import format_history
from composer.errors import LockBusy
from composer.swap import probation
from composer.swap.journal import RUNNING, RunningSwap, process_start, project_dir
from composer.swap.lock import hand_over, lock_path, swap_lock
from composer.swap.outcome import UpResult


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_a_lock_handed_to_a_forked_watcher_stays_held_until_the_watcher_ends(tmp_path: Path) -> None:
    folder = tmp_path / "locks"
    gate_r, gate_w = os.pipe()
    with swap_lock("proj", directory=folder):
        pid = os.fork()
        if pid == 0:  # the watcher: holds the inherited lock until told to end
            os.read(gate_r, 1)
            os._exit(0)
        hand_over("proj", pid)
    try:
        assert lock_path("proj", folder).read_text().strip() == str(pid)  # the file names the watcher
        with pytest.raises(LockBusy, match=f"pid {pid}"), swap_lock("proj", wait=False, directory=folder):
            pass
    finally:
        os.write(gate_w, b"x")
        os.waitpid(pid, 0)
    with swap_lock("proj", wait=False, directory=folder):  # its end lets go of the lock
        pass


def test_a_probation_record_says_until_when_and_what_a_crash_brings_back() -> None:
    until = time.time() + 30
    record = RunningSwap(
        1234, "baseline", "mtp", probation.STAGE, time.time(), time.time(), 900.0, until=until
    )
    clock = time.strftime("%H:%M:%S", time.localtime(until))
    assert record.line() == (
        f"mtp serves, on probation until {clock} (pid 1234): a crash or a restart rolls it back to baseline"
    )


def test_ups_last_line_says_the_probation_goes_on_after_it() -> None:
    result = UpResult("mtp", "swapped", timings={"total": 7.5})
    result.drained = {"finished": 0, "cut": 0, "continued": 2, "refused": 0}
    result.probation = {"until": "2026-12-07T07:12:03+00:00", "pid": 9, "log": "x", "outcome": "running"}
    line = outcome_line("mtp", result)
    assert line.startswith("mtp: swapped (7.5s); in flight: 2 streams continued, 0 finished, 0 cut; ")
    assert "; on probation until " in line and "`compose-spec status` shows it" in line


def test_the_history_shows_a_switch_left_on_probation_and_how_it_ended() -> None:
    running = {"until": "2026-12-07T07:12:03+00:00", "outcome": "running"}
    up = {"time": 1.0, "kind": "up", "source": "baseline", "target": "mtp", "outcome": "swapped"}
    ended = {"time": 2.0, "kind": "probation", "source": "baseline", "target": "mtp", "outcome": "passed"}
    rows = format_history([up | {"probation": running}, ended]).splitlines()
    assert "swapped, then on probation" in rows[1]
    assert rows[2].split()[2:6] == ["probation", "baseline", "mtp", "passed"]


WATCHER = """
import signal, sys
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(7))
print("ready", flush=True)
signal.pause()
"""


def _record(project: str, pid: int, until: float | None) -> None:
    now = time.time()
    folder = project_dir(project)
    folder.mkdir(parents=True, exist_ok=True)
    data = {"pid": pid, "pid_start": process_start(pid), "source": "baseline", "target": "mtp"}
    data |= {"stage": probation.STAGE, "started": now, "stage_started": now, "timeout": 900, "until": until}
    (folder / RUNNING).write_text(json.dumps(data))


def test_the_next_change_ends_a_running_probation_first() -> None:
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER], stdout=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == "ready\n"
        _record("proj", watcher.pid, time.time() + 600)
        said: list[str] = []
        probation.end_probation("proj", said.append)  # returns once the watcher ended (a zombie here)
        assert watcher.wait(timeout=5) == 7
        assert said == [f"ending mtp's probation (pid {watcher.pid}): a new change of the project was asked"]
    finally:
        watcher.kill()


def test_a_swap_that_waits_through_its_probation_itself_is_not_ended() -> None:
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER], stdout=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == "ready\n"
        _record("proj", watcher.pid, None)  # `up --wait-probation`: the next change waits for the lock
        said: list[str] = []
        probation.end_probation("proj", said.append)
        assert said == [] and watcher.poll() is None
    finally:
        watcher.kill()
        watcher.wait()


def test_an_end_asked_before_the_watch_began_ends_it_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probation, "_asked", True)
    reached = False
    with pytest.raises(probation.ProbationEnded), probation.ending():
        reached = True
    assert not reached
