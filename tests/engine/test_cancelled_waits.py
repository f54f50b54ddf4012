"""A stop reaches a change running in a worker thread through its waits (`bench --decide`'s
follower): every named wait ends with KeyboardInterrupt, except inside an undo, which finishes."""

from __future__ import annotations

import threading

from composer import signals
from composer.engine import retry
from composer.engine.retry import Pending


def _waiting_forever() -> None:
    raise Pending("not yet")


def _run_in_thread(target) -> tuple[threading.Thread, list[BaseException | str]]:
    outcome: list[BaseException | str] = []
    started = threading.Event()

    def body() -> None:
        started.set()
        try:
            target()
            outcome.append("returned")
        except BaseException as err:  # the KeyboardInterrupt under test
            outcome.append(err)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    started.wait()
    return thread, outcome


def test_a_cancelled_stop_ends_a_wait_in_another_thread_at_its_next_pause() -> None:
    thread, outcome = _run_in_thread(lambda: retry.within(3600, 0.05)(_waiting_forever))
    with signals.waits_cancelled():
        thread.join(30)  # a condition, not a time budget: without the stop it runs for an hour
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], KeyboardInterrupt)


def test_an_undo_finishes_its_waits_while_waits_are_cancelled() -> None:
    turns: list[int] = []

    def undo_step() -> None:
        turns.append(1)
        if len(turns) < 4:
            raise Pending("the previous variant is not ready yet")

    def undo() -> None:
        with signals.interrupts_ignored():
            retry.within(3600, 0.01)(undo_step)

    with signals.waits_cancelled():
        thread, outcome = _run_in_thread(undo)
        thread.join(30)
    assert outcome == ["returned"] and len(turns) == 4


def test_waits_run_normally_once_the_cancelled_block_ends() -> None:
    with signals.waits_cancelled():
        pass
    turns: list[int] = []

    def step() -> None:
        turns.append(1)
        if len(turns) < 3:
            raise Pending("again")

    retry.within(3600, 0.01)(step)
    assert len(turns) == 3
