"""What a swap leaves on disk, under hostile or broken input: a corrupt history is skipped line by
line (and never fails a swap), and the record of a killed swap becomes an `interrupted` event
instead of a swap `status` thinks still runs (a reused pid included)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from composer.cli import main
from composer.swap import journal
from composer.swap.journal import (
    HISTORY,
    RUNNING,
    TRIM_BYTES,
    SwapRecord,
    append_history,
    process_start,
    read_history,
    running_swap,
)
from composer.swap.lock import swap_lock
from tests.conftest import REPO

PROJECT = "hardened"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An own state folder and lock folder (the project's files live in state/PROJECT)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("VLLM_COMPOSER_LOCK_DIR", str(tmp_path / "locks"))
    folder = tmp_path / "xdg" / "vllm-composer" / PROJECT
    folder.mkdir(parents=True)
    return folder


def _event(target: str, when: float = 1_700_000_000.0) -> bytes:
    entry = {"time": when, "kind": "up", "source": "baseline", "target": target, "outcome": "swapped"}
    return json.dumps(entry).encode()


def _history_cli(tmp_path: Path, *args: str):
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    base = ["--env-file", str(env_file), "--stack", str(REPO / "composer.toml"), "-p", PROJECT]
    return CliRunner().invoke(main, [*base, "history", *args], catch_exceptions=False)


def test_corrupt_history_lines_are_skipped_counted_and_said_once(tmp_path: Path, state: Path) -> None:
    lines = [
        _event("mtp"),
        b'{"time": "not a number", "kind": "up", "target": "mtp"}',
        b"[" * 200_000 + b"]" * 200_000,  # past the JSON parser's recursion limit
        b'{"time": 1700000001, "target": "bad \xff\xfe utf-8"}',
        b'{"time": 1700000002, "drained": {"cut": "many"}}',
        b'{"time": 1700000003, "drained": {"cut": 0, "continued": [1]}}',
        b'{"time": NaN, "target": "mtp"}',
        _event("dflash2", 1_700_000_100.0),
    ]
    (state / HISTORY).write_bytes(b"\n".join(lines) + b"\n")
    history = read_history(PROJECT)
    assert [e["target"] for e in history.events] == ["mtp", "dflash2"]
    assert history.skipped == 6
    result = _history_cli(tmp_path)
    assert result.exit_code == 0, result.output
    rows = [line.split()[3:5] for line in result.stdout.splitlines()[1:]]
    assert rows == [["baseline", "mtp"], ["baseline", "dflash2"]]
    assert result.stderr.splitlines() == [f"note: skipped 6 unreadable line(s) of {state / HISTORY}"]
    as_json = _history_cli(tmp_path, "--json")
    assert as_json.exit_code == 0 and len(json.loads(as_json.stdout)) == 2


def test_a_history_past_its_trim_size_with_a_bad_byte_never_fails_the_next_swap(state: Path) -> None:
    line = _event("mtp")
    count = TRIM_BYTES // len(line) + 10
    body = [line] * count
    body[count // 2] = b'{"time": 1700000000, "target": "\xff"}'
    (state / HISTORY).write_bytes(b"\n".join(body) + b"\n")
    append_history(PROJECT, {"kind": "up", "source": "mtp", "target": "baseline", "outcome": "swapped"})
    kept = (state / HISTORY).read_bytes()
    assert len(kept) <= TRIM_BYTES
    assert json.loads(kept.splitlines()[-1])["target"] == "baseline", "the new event is kept"
    assert read_history(PROJECT, 1).events[0]["target"] == "baseline"


def test_a_record_whose_pid_was_reused_is_no_running_swap(state: Path) -> None:
    """The record names a live process (this one), but one that started at another time."""
    record = {"pid": os.getpid(), "pid_start": "1", "source": "baseline", "target": "mtp", "stage": "loading"}
    record |= {"started": 0, "stage_started": 0, "timeout": 900}
    (state / RUNNING).write_text(json.dumps(record))
    assert running_swap(PROJECT) is None
    assert not (state / RUNNING).exists()
    (event,) = read_history(PROJECT).events
    assert event["outcome"] == "interrupted" and event["target"] == "mtp" and "loading" in event["cause"]


def test_an_old_record_without_a_start_time_is_no_running_swap(state: Path) -> None:
    record = {"pid": os.getpid(), "source": None, "target": "mtp", "stage": "loading"}
    (state / RUNNING).write_text(json.dumps(record | {"started": 0, "timeout": 900}))
    assert running_swap(PROJECT) is None


def test_the_record_of_a_running_swap_is_read_back(state: Path) -> None:
    with swap_lock(PROJECT):
        record = SwapRecord(PROJECT, {"serving": "baseline", "target": "mtp", "steps": ["stop"]}, 900)
        record.stage("loading")
        running = running_swap(PROJECT)
        assert running is not None and running.pid == os.getpid() and running.stage == "loading"
        assert running.pid_start == process_start(os.getpid())
        record.close()
    assert running_swap(PROJECT) is None and read_history(PROJECT).events == []


def test_a_live_change_is_recorded_as_one_and_a_killed_one_is_a_live_event(state: Path) -> None:
    """A live set's change writes the same record as a swap (`Plan.recording`): `status`
    says which set changes into which, at which operation; left behind, it is a live event."""
    from composer.swap.ops import Member, Start
    from composer.swap.plan import Plan

    mtp = Member("mtp/1", "mtp", "vllm-mtp-1", "vllm-mtp-1", "live.yml", "2,3")
    plan = Plan(("baseline/1",), ("baseline/1", "mtp/1"), (Start(mtp, live=True),))
    with swap_lock(PROJECT):
        record = plan.recording(PROJECT, 60, "live")
        record.stage(plan.ops[0].describe())
        running = running_swap(PROJECT)
        assert running is not None and running.kind == "live"
        assert running.line(running.started).startswith(
            f"changing the live set baseline/1 -> baseline+mtp (pid {os.getpid()}): {plan.ops[0].describe()} 0 s"
        )
        stale = json.loads((state / RUNNING).read_text()) | {"pid": 999_999_999}
        record.close()
    (state / RUNNING).write_text(json.dumps(stale))
    assert running_swap(PROJECT) is None  # its process is gone: reaped
    (event,) = read_history(PROJECT).events
    assert (event["kind"], event["source"], event["target"], event["outcome"]) == (
        "live",
        "baseline/1",
        "baseline+mtp",
        "interrupted",
    )
    assert event["steps"] == [plan.ops[0].describe()] and plan.ops[0].describe() in event["cause"]


def test_a_down_is_recorded_as_one_and_a_killed_one_is_a_down_event(state: Path) -> None:
    """`down` writes the running record every change writes: `status` says what it stops; left
    behind by a killed `down`, it is an interrupted `down` event (not a swap's)."""
    from composer.swap.ops import Member, Stop
    from composer.swap.plan import Plan

    mtp = Member("mtp", "mtp", "vllm-mtp-1", "vllm", "mtp.yml")
    plan = Plan(("mtp",), (), (Stop(mtp),))
    with swap_lock(PROJECT):
        record = plan.recording(PROJECT, 60, "down")
        record.stage("stopping")
        running = running_swap(PROJECT)
        assert running is not None and running.kind == "down"
        assert running.line(running.started) == f"stopping mtp (pid {os.getpid()}): stopping 0 s of 60 s"
        stale = json.loads((state / RUNNING).read_text()) | {"pid": 999_999_999}
        record.close()
    (state / RUNNING).write_text(json.dumps(stale))
    assert running_swap(PROJECT) is None
    (event,) = read_history(PROJECT).events
    assert (event["kind"], event["source"], event["outcome"]) == ("down", "mtp", "interrupted")


def test_a_stale_record_is_left_alone_while_a_swap_holds_the_lock(state: Path) -> None:
    """The follower's swap writes pids of another namespace: while the lock is held, the
    record is not taken for a killed swap's."""
    record = {"pid": 999_999_999, "pid_start": "5", "target": "mtp", "stage": "loading"}
    (state / RUNNING).write_text(json.dumps(record | {"started": 1, "timeout": 900}))
    with swap_lock(PROJECT):
        assert running_swap(PROJECT) is None
        assert read_history(PROJECT).events == []
        assert (state / RUNNING).exists()
    assert [e["outcome"] for e in read_history(PROJECT).events] == ["interrupted"], "reaped once free"


_KILLED_UP = """
import sys, time
from composer.swap.journal import SwapRecord
from composer.swap.lock import swap_lock
with swap_lock(sys.argv[1]):
    record = SwapRecord(sys.argv[1], {"serving": "baseline", "target": "mtp", "steps": ["stop", "start"]}, 900)
    record.stage("loading")
    print("loading", flush=True)
    time.sleep(600)
"""


def test_a_killed_up_leaves_an_interrupted_event_that_history_and_status_name(
    tmp_path: Path, state: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_UP, PROJECT], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "loading"
        running = running_swap(PROJECT)
        assert running is not None and running.pid == child.pid
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    result = _history_cli(tmp_path)
    assert result.exit_code == 0, result.output
    row, cause = result.stdout.splitlines()[1:3]
    assert row.split()[3:6] == ["baseline", "mtp", "interrupted"] and f"pid {child.pid}" in cause
    assert not (state / RUNNING).exists()
    from composer.swap.status import interrupted_warning

    warning = interrupted_warning(PROJECT)
    assert warning and "baseline -> mtp, was interrupted" in warning and "loading" in warning
    assert warning.endswith("`compose-spec up mtp` repairs it") and "compose-spec status" not in warning
    append_history(PROJECT, {"kind": "up", "source": "baseline", "target": "mtp", "outcome": "swapped"})
    assert interrupted_warning(PROJECT) is None, "only the last swap is named"


def test_a_record_that_is_no_record_is_ignored(state: Path) -> None:
    for text in (
        "[" * 100_000,
        '{"pid": -1, "target": "x", "stage": "s", "started": 1, "timeout": 1}',
        "\xff",
    ):
        (state / RUNNING).write_text(text, errors="surrogateescape")
        assert running_swap(PROJECT) is None
    assert journal.process_start(2**22 + 12345) is None


def test_a_live_change_records_what_served_before_it(state: Path) -> None:
    """A change from a live set to one variant (and any live change) names its FROM: the
    variants that served before, as its target names those that serve after."""
    from composer.swap.entry import UpResult
    from composer.swap.ops import Member, Stop
    from composer.swap.plan import Plan
    from composer.swap.runner import Change, run

    class Engine:  # runs every operation without doing anything
        def __init__(self) -> None:
            self.timings: dict[str, float] = {}

        def handlers(self):
            return {Stop: lambda op: None}

        def failed(self, *_: object) -> None: ...

        def explain(self, *_: object) -> None: ...

        def finish(self, *_: object) -> None: ...

    mtp = Member("mtp/1", "mtp", "vllm-mtp-1", "vllm-mtp-1", "live.yml", "2,3")
    plan = Plan(("baseline/1", "mtp/1"), ("mtp/1",), (Stop(mtp, live=True),))
    run(plan, Engine(), UpResult(variant="mtp", outcome="changed"), Change(PROJECT, "live"))
    (event,) = read_history(PROJECT).events
    assert (event["kind"], event["source"], event["target"]) == ("live", "baseline+mtp", "mtp")
