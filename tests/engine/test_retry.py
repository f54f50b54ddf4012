"""The named retry policies: what they retry, when they stop, what they raise."""

from __future__ import annotations

import threading

import pytest

from composer.engine import retry
from composer.engine.retry import Pending
from tests.conftest import FakeClock


def test_until_retries_pending_at_its_interval_then_reraises_the_last() -> None:
    clock, calls = FakeClock(), []

    def step() -> None:
        calls.append(clock())
        raise Pending(f"not yet at {clock():.1f}")

    with pytest.raises(Pending, match=r"not yet at 101\.0"):
        retry.within(1.0, 0.25, clock=clock, sleep=clock.sleep)(step)
    assert calls == [100.0, 100.25, 100.5, 100.75, 101.0]
    assert clock.slept == [0.25] * 4


def test_until_returns_the_first_result_and_never_retries_other_errors() -> None:
    clock, calls = FakeClock(), []

    def ready_on_third() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Pending("starting")
        return "ready"

    assert retry.within(10, 1, clock=clock, sleep=clock.sleep)(ready_on_third) == "ready"

    def fatal() -> None:
        calls.append(1)
        raise RuntimeError("exited")

    calls.clear()
    with pytest.raises(RuntimeError, match="exited"):
        retry.within(10, 1, clock=clock, sleep=clock.sleep)(fatal)
    assert calls == [1]


def test_watch_ends_quietly_at_its_deadline_and_loudly_on_a_failure() -> None:
    clock = FakeClock()
    policy = retry.watch(1.0, 0.5, clock=clock, sleep=clock.sleep)
    seen = []

    def healthy() -> None:
        seen.append(clock())
        raise Pending("still healthy")

    assert policy(healthy) is None
    assert seen == [100.0, 100.5, 101.0]
    with pytest.raises(ValueError, match="crashed"):
        retry.watch(5, 0.01)(lambda: (_ for _ in ()).throw(ValueError("crashed")))


def test_renewal_stops_when_its_event_is_set_and_survives_listed_errors() -> None:
    stopped, turns = threading.Event(), []

    def renew() -> None:
        if stopped.is_set():
            return
        turns.append(1)
        if len(turns) == 2:
            raise ConnectionError("control channel busy")
        if len(turns) == 4:
            stopped.set()
        raise Pending("renewed")

    assert retry.renewal(0.001, stopped, (ConnectionError,))(renew) is None
    assert len(turns) == 4


def test_reopen_retries_at_once_without_limit() -> None:
    left = [1, 1, 1]

    def step() -> str:
        if left:
            left.pop()
            raise Pending("replaced meanwhile")
        return "fd"

    assert retry.reopen()(step) == "fd"
