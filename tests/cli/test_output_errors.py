"""A closed stdout or stderr never aborts a swap (the progress line goes quiet), and SIGHUP (a
closed terminal) interrupts like SIGTERM, so a swap rolls back instead of dying outright."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from composer.cli.output import LiveLine
from composer.cli.swap import report_swap
from composer.signals import interrupts
from composer.swap.outcome import UpResult


class BrokenStream:
    """A stream whose reader went away (`| head` finished, the terminal closed)."""

    def __init__(self, error: type[OSError] = BrokenPipeError) -> None:
        self.error = error
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise self.error(32, "Broken pipe")

    def flush(self) -> None:
        raise self.error(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("error", [BrokenPipeError, OSError])
def test_the_progress_line_goes_quiet_when_stderr_breaks(monkeypatch, error: type[OSError]) -> None:
    stream = BrokenStream(error)
    monkeypatch.setattr(sys, "stderr", stream)
    line = LiveLine()
    line.step("stopping mtp")
    tried = stream.writes
    line.waiting("waiting for baseline (3s)")
    line.step("rolling back")
    line.finish()
    assert line.broken and tried >= 1 and stream.writes == tried  # quiet after the first error


def test_a_swap_reporting_into_a_closed_pipe_runs_to_its_end(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stderr", BrokenStream())
    steps_done: list[str] = []

    def swap(line: LiveLine) -> UpResult:
        for step in ("hold", "stop", "start", "gate", "release"):
            line.step(f"{step}...")  # raised BrokenPipeError here, mid-swap, before the fix
            steps_done.append(step)
        return UpResult(
            "mtp", "swapped", timings={"total": 1.0}, warnings=["hold_timeout is short"], notes=["n"]
        )

    report_swap("mtp", False, swap)
    assert steps_done == ["hold", "stop", "start", "gate", "release"]
    assert capsys.readouterr().out.startswith("mtp: swapped")


def _let_handlers_run() -> None:
    for _ in range(200):  # Python runs a signal's handler between bytecodes
        time.sleep(0.01)


@pytest.mark.usefixtures("default_sighup")
def test_sighup_interrupts_like_sigterm() -> None:
    before = signal.getsignal(signal.SIGHUP)
    with pytest.raises(KeyboardInterrupt), interrupts():
        os.kill(os.getpid(), signal.SIGHUP)
        _let_handlers_run()
    assert signal.getsignal(signal.SIGHUP) == before


def test_an_ignored_sighup_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup compose-spec up ...
    try:
        with interrupts():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            _let_handlers_run()
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.usefixtures("default_sighup")
def test_a_swap_treats_sighup_as_a_stop_signal() -> None:
    from composer import signals

    assert signal.SIGHUP in signals.STOP_SIGNALS
    with pytest.raises(KeyboardInterrupt), signals.handled(signals.interrupt_once):
        os.kill(os.getpid(), signal.SIGHUP)
        _let_handlers_run()
    # inside the rollback a second hangup is ignored
    with signals.interrupts_ignored():
        os.kill(os.getpid(), signal.SIGHUP)
        _let_handlers_run()
