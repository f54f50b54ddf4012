"""The executor of typed operations: what runs, what is undone, in which order, under signals."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import pytest

from composer.errors import HealthCheckFailed, SwapFailed
from composer.swap.execute import execute
from composer.swap.ops import Op


@dataclass(frozen=True)
class Do(Op):
    name: str

    def inverse(self) -> tuple[Op, ...]:
        return (Undo(self.name),)

    def describe(self) -> str:
        return f"do {self.name}"


@dataclass(frozen=True)
class Undo(Op):
    name: str

    def describe(self) -> str:
        return f"undo {self.name}"


@dataclass(frozen=True)
class Look(Op):
    """An operation with nothing to undo."""

    name: str

    def describe(self) -> str:
        return f"look {self.name}"


class Recorder:
    def __init__(self, fail: str = "", signal_at: str = "", undo_fails: str = "") -> None:
        self.log: list[str] = []
        self.fail, self.signal_at, self.undo_fails = fail, signal_at, undo_fails

    def do(self, op: Do | Look) -> None:
        self.log.append(op.describe())
        if op.name == self.signal_at:
            os.kill(os.getpid(), signal.SIGTERM)
        if op.name == self.fail:
            raise HealthCheckFailed(f"{op.name} is not ready", "the log tail")

    def undo(self, op: Undo) -> None:
        self.log.append(op.describe())
        if self.signal_at:
            os.kill(os.getpid(), signal.SIGINT)  # ignored: an undo always finishes
        if op.name == self.undo_fails:
            raise RuntimeError("docker went away")

    def handlers(self) -> dict:
        return {Do: self.do, Look: self.do, Undo: self.undo}


OPS = (Do("a"), Look("b"), Do("c"), Do("d"))


def test_every_operation_runs_in_order_when_none_fails() -> None:
    rec = Recorder()
    assert execute(OPS, rec.handlers()) == list(OPS)
    assert rec.log == ["do a", "look b", "do c", "do d"]


@pytest.mark.parametrize(
    ("fail", "undone"),
    [
        ("a", ["undo a"]),
        ("b", ["undo a"]),
        ("c", ["undo c", "undo a"]),
        ("d", ["undo d", "undo c", "undo a"]),
    ],
)
def test_a_failure_undoes_what_ran_newest_first(fail: str, undone: list[str]) -> None:
    rec = Recorder(fail=fail)
    with pytest.raises(SwapFailed) as caught:
        execute(OPS, rec.handlers())
    ran = [op.describe() for op in OPS[: [o.name for o in OPS].index(fail) + 1]]
    assert rec.log == ran + undone
    assert caught.value.rolled_back and caught.value.log_tail == "the log tail"
    assert str(caught.value).startswith(f"{OPS[[o.name for o in OPS].index(fail)].describe()} failed: {fail}")
    assert isinstance(caught.value.__cause__, HealthCheckFailed)


@pytest.mark.parametrize("at", ["a", "c", "d"])
def test_a_stop_signal_undoes_then_raises_from_the_interrupt(at: str) -> None:
    rec = Recorder(signal_at=at)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SwapFailed) as caught:
        execute(OPS, rec.handlers())
    assert isinstance(caught.value.__cause__, KeyboardInterrupt)  # the CLI exits 130
    assert "interrupted" in str(caught.value) and caught.value.rolled_back
    names = [o.name for o in OPS]
    undone = [f"undo {o.name}" for o in reversed(OPS[: names.index(at) + 1]) if isinstance(o, Do)]
    assert rec.log[-len(undone) :] == undone  # every undo ran although each sent SIGINT
    assert signal.getsignal(signal.SIGINT) is before  # the handlers are given back


def test_without_rollback_nothing_is_undone() -> None:
    rec = Recorder(fail="c")
    with pytest.raises(SwapFailed) as caught:
        execute(OPS, rec.handlers(), rollback=False)
    assert rec.log == ["do a", "look b", "do c"]
    assert not caught.value.rolled_back and "rollback disabled" in str(caught.value)


def test_an_undo_that_fails_is_reported_after_the_cause_and_the_rest_still_run() -> None:
    rec = Recorder(fail="d", undo_fails="c")
    with pytest.raises(SwapFailed) as caught:
        execute(OPS, rec.handlers())
    assert rec.log[-3:] == ["undo d", "undo c", "undo a"]
    message = str(caught.value)
    assert not caught.value.rolled_back
    assert message.index("d is not ready") < message.index("undo c: RuntimeError: docker went away")


def test_the_failed_operation_is_seen_before_anything_is_undone() -> None:
    rec = Recorder(fail="c")
    seen: list[tuple[str, str, list[str]]] = []
    with pytest.raises(SwapFailed):
        execute(
            OPS, rec.handlers(), failed=lambda op, err: seen.append((op.describe(), str(err), list(rec.log)))
        )
    assert seen == [("do c", "c is not ready", ["do a", "look b", "do c"])]  # its evidence, then the undo
    assert rec.log[-2:] == ["undo c", "undo a"]


def test_the_running_record_hears_each_operation_then_the_undo() -> None:
    rec = Recorder(fail="c")
    stages: list[str] = []
    with pytest.raises(SwapFailed):
        execute(OPS, rec.handlers(), stage=stages.append)
    assert stages == ["do a", "look b", "do c", "undoing"]
    stages.clear()
    with pytest.raises(SwapFailed):
        execute(OPS, Recorder(fail="b").handlers(), rollback=False, stage=stages.append)
    assert stages == ["do a", "look b"]  # nothing is undone, so no undo stage
