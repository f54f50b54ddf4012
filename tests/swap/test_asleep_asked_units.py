"""Who sleeps is each container's own `/is_sleeping` answer, also with the gateway stopped:
the snapshot then asks the container itself (one exec), never infers it from a route."""

from __future__ import annotations

from types import SimpleNamespace

from composer.engine.variant_container import VariantContainer
from composer.swap import snapshot
from tests.swap.test_plan_units import _info
from tests.swap.test_standby_units import _stack


class Answering:
    """A sleep-mode container that answers `/is_sleeping` itself."""

    def __init__(self, info, sleeping: bool | None) -> None:
        self.info, self.sleeping, self.asked = info, sleeping, 0
        self.name = info.name
        self.container = SimpleNamespace(labels={})  # not a live member

    def describe(self):
        return self.info

    def is_sleeping(self) -> bool | None:
        self.asked += 1
        return self.sleeping


def test_with_the_gateway_stopped_each_sleep_mode_container_is_asked(monkeypatch) -> None:
    stack = _stack("stack.standby=sleep")
    # Neither is parked (say, both restarted by Docker): only their own answers tell.
    serving = Answering(_info("baseline", service="vllm-baseline", sleep_mode=True), sleeping=False)
    asleep = Answering(_info("mtp", service="vllm-mtp", sleep_mode=True), sleeping=True)
    monkeypatch.setattr(snapshot, "project_containers", lambda stack, client: ([asleep, serving], None, ()))
    snap = snapshot.take(stack, None)  # type: ignore[arg-type]
    assert snap.current is not None and snap.current.variant == "baseline"
    assert [m.variant for m in snap.asleep] == ["mtp"]
    assert (serving.asked, asleep.asked) == (1, 1)
    assert [m.variant for m in snapshot.take(stack, None, ask_sleeping=False).asleep] == []  # type: ignore[arg-type]


class Exec:
    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)

    def exec_run(self, cmd: list[str]) -> object:
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_a_container_s_own_answer_is_read_and_no_answer_is_none() -> None:
    container = VariantContainer(Exec((0, b"True\n"), (0, b"False\n"), (1, b"refused"), OSError("gone")))  # type: ignore[arg-type]
    assert [container.is_sleeping() for _ in range(4)] == [True, False, None, None]
