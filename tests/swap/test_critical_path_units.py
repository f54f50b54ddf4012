"""The swap's critical path without Docker: when the settle watch begins, the control
session opened while `up` plans, restart policies set off the hold, the warm-up the
acceptance check already sent, and the control socket's one client per process."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from composer.errors import SwapFailed
from composer.gateway import ctl
from composer.swap import holding, standby, transaction


def _started(started_ago: float) -> SimpleNamespace:
    """A container whose process started `started_ago` seconds ago."""
    when = datetime.now(UTC) - timedelta(seconds=started_ago)
    attrs = {"State": {"StartedAt": when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"}}
    return SimpleNamespace(container=SimpleNamespace(attrs=attrs))


def test_a_started_container_settles_from_when_it_became_ready() -> None:
    now = time.monotonic()
    since = transaction.engine_started("ready", _started(100.0), now, now - 5)  # type: ignore[arg-type]
    assert since == now  # its load can fail late: the whole window after readiness
    assert transaction.settle_left(1.0, since, now=now) == 1.0


def test_a_woken_container_settles_from_the_wake_call() -> None:
    now = time.monotonic()
    since = transaction.engine_started("wake", None, now, now - 0.2)
    assert since == pytest.approx(now - 0.2)
    assert transaction.settle_left(0.25, since, now=now) == pytest.approx(0.05)
    assert transaction.settle_left(0.25, now - 1.0, now=now) == 0.0


def test_a_container_running_long_ago_has_settled() -> None:
    """Adopted or routed to again: the watch counts from its process's start."""
    now = time.monotonic()
    since = transaction.engine_started("process", _started(30.0), now, now)  # type: ignore[arg-type]
    assert now - since == pytest.approx(30.0, abs=1.0)
    assert transaction.settle_left(1.0, since) == 0.0
    unknown = transaction.engine_started("process", None, now, now)
    assert unknown == now  # no start time: the whole window after readiness


class _Hold:
    def __init__(self) -> None:
        self.closed = 0

    def close_tether(self) -> None:
        self.closed += 1


def test_an_early_session_dropped_before_it_opened_is_closed_once_it_opens() -> None:
    hold, go = _Hold(), threading.Event()

    def open_hold() -> _Hold:
        go.wait(5)
        return hold

    early = holding.EarlyHold(open_hold)  # type: ignore[arg-type]
    early.drop()
    assert hold.closed == 0
    go.set()
    for _ in range(100):
        if hold.closed:
            break
        time.sleep(0.01)
    assert hold.closed == 1


def test_an_early_session_taken_is_never_closed_by_drop() -> None:
    hold = _Hold()
    early = holding.EarlyHold(lambda: hold)  # type: ignore[arg-type,return-value]
    assert early.take() is hold
    early.drop()
    assert hold.closed == 0


def test_an_early_session_that_failed_raises_where_the_drain_would() -> None:
    def open_hold() -> None:
        raise SwapFailed("the gateway does not answer its control channel: timeout")

    early = holding.EarlyHold(open_hold)
    with pytest.raises(SwapFailed, match="control channel"):
        early.take()
    assert holding.EarlyHold(lambda: None).take() is None  # the gateway did not run


class _Container:
    def __init__(self, seen: list[str], delay: float) -> None:
        self.seen, self.delay = seen, delay

    def update(self, restart_policy: dict[str, str]) -> None:
        time.sleep(self.delay)
        self.seen.append(restart_policy["Name"])


def test_restart_policies_are_set_in_the_order_asked_and_awaited() -> None:
    seen: list[str] = []
    slow = SimpleNamespace(container=_Container(seen, 0.2))
    fast = SimpleNamespace(container=_Container(seen, 0.0))
    standby.park(slow)  # type: ignore[arg-type]
    standby.unpark(fast, "unless-stopped")  # type: ignore[arg-type]
    standby.updates_done()
    assert seen == ["no", "unless-stopped"]


def _stack(warmup: int) -> SimpleNamespace:
    return SimpleNamespace(gateway=SimpleNamespace(warmup_requests=warmup), acceptance_floor=0.5)


@pytest.mark.parametrize(("warmup", "speculative", "sent"), [(1, True, None), (3, True, 1), (1, False, 1)])
def test_the_acceptance_checks_requests_count_as_warm_up(monkeypatch, warmup, speculative, sent) -> None:
    from composer.swap.ops import Member, Settle
    from composer.swap.plan import Bring, plan_swap

    asked: list[int | None] = []
    checked: list[str] = []
    monkeypatch.setattr(standby, "check_awake", lambda control, v: checked.append("awake"))
    monkeypatch.setattr(standby, "check_acceptance", lambda *a: checked.append("acceptance") or 0.9)
    monkeypatch.setattr(transaction, "warm_up", lambda where, n: asked.append(n) or [0.1] * n)
    member = Member("mtp", "mtp", "p-vllm-mtp-1", "vllm-mtp", "run.yml", speculative=speculative)
    plan = plan_swap(
        "mtp", "h", None, False, target_asleep=True, bring=Bring(member, gateway=True, warmup=warmup)
    )
    settle = plan.ops[-1]
    assert isinstance(settle, Settle) and settle.woke and settle.acceptance == speculative
    ctx = SimpleNamespace(
        hold=object(), stack=_stack(warmup), control=lambda: None, past_the_hold=lambda where: where
    )
    notes: list[str] = []
    timings: dict[str, float] = {}
    beside = transaction.beside_settle(ctx, settle, None, notes, timings)  # type: ignore[arg-type]
    assert beside is not None
    beside()
    assert checked == (["awake", "acceptance"] if speculative else ["awake"])
    assert asked == ([] if sent is None else [sent])
    assert ("acceptance after the wake: 0.90" in notes) == speculative
    assert ("warmup" in timings) == (sent is not None)


def test_the_control_socket_has_one_client_per_process_and_no_tls() -> None:
    first = ctl._client("/run/none/control.sock")
    assert ctl._client("/run/none/control.sock") is first
    assert str(first.base_url).startswith("http://")
