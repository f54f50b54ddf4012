"""The gate on its own (asyncio, no HTTP): order, bounds, leases, drain accounting."""

from __future__ import annotations

import asyncio
import time

import pytest

from composer.gateway.routing.gate import Gate, Refused, UnknownHold
from composer.gateway.status.metrics import Metrics


def make_gate(**kw) -> Gate:
    kw.setdefault("max_held", 10)
    kw.setdefault("hold_timeout", 5.0)
    return Gate(retry_after=2, metrics=Metrics(), **kw)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_open_gate_admits_at_once_and_counts_inflight() -> None:
    async def main() -> None:
        gate = make_gate()
        gate.set_backend_ready(True)
        t = await gate.enter(gate.deadline())
        assert gate.inflight == 1 and gate.held == 0
        t.done()
        assert gate.inflight == 0

    run(main())


def test_release_in_arrival_order() -> None:
    async def main() -> list[int]:
        gate = make_gate()
        order: list[int] = []

        async def client(i: int) -> None:
            ticket = await gate.enter(gate.deadline())
            order.append(i)
            ticket.mark_dispatched()
            await asyncio.sleep(0.01)
            ticket.done()

        tasks = []
        for i in range(8):
            tasks.append(asyncio.create_task(client(i)))
            await asyncio.sleep(0.001)
        assert gate.held == 8
        gate.set_backend_ready(True)
        await asyncio.gather(*tasks)
        return order

    assert run(main()) == list(range(8))


def test_new_arrivals_queue_behind_released_ones() -> None:
    async def main() -> list[str]:
        gate = make_gate()
        order: list[str] = []

        async def client(name: str) -> None:
            ticket = await gate.enter(gate.deadline())
            order.append(name)
            await asyncio.sleep(0.02)  # never marks dispatched: the releaser paces at its bound
            ticket.done()

        held = [asyncio.create_task(client(f"held{i}")) for i in range(3)]
        await asyncio.sleep(0.01)
        gate.set_backend_ready(True)
        late = asyncio.create_task(client("late"))
        await asyncio.gather(*held, late)
        return order

    assert run(main()) == ["held0", "held1", "held2", "late"]


def test_hold_timeout_refuses_with_503() -> None:
    async def main() -> None:
        gate = make_gate(hold_timeout=0.2)
        started = time.monotonic()
        with pytest.raises(Refused) as err:
            await gate.enter(gate.deadline())
        assert err.value.reason == "hold_timeout" and err.value.status == 503
        assert 0.15 < time.monotonic() - started < 10  # at its timeout, not before; never stuck
        assert gate.held == 0

    run(main())


def test_queue_full_refuses_with_429() -> None:
    async def main() -> None:
        gate = make_gate(max_held=2)
        waiting = [asyncio.create_task(gate.enter(gate.deadline())) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(Refused) as err:
            await gate.enter(gate.deadline())
        assert err.value.reason == "queue_full" and err.value.status == 429
        gate.set_backend_ready(True)
        for t in await asyncio.gather(*waiting):
            t.done()

    run(main())


def test_hold_lease_expires_and_renew_extends_it() -> None:
    async def main() -> None:
        gate = make_gate()
        gate.set_backend_ready(True)
        hold = gate.add_hold(0.5, "swap")
        assert not gate.is_open
        gate.renew(hold.id, 60.0)
        await asyncio.sleep(1.0)  # past the first lease: only the renewal holds now
        assert not gate.is_open, "renewed lease must still hold"
        gate.renew(hold.id, 0.2)  # not renewed again: it expires on its own
        waiter = asyncio.create_task(gate.enter(gate.deadline()))
        (await asyncio.wait_for(waiter, 10)).done()
        assert gate.is_open, "lease not renewed: the hold expires"
        with pytest.raises(UnknownHold):
            gate.renew(hold.id)

    run(main())


def test_drain_counts_finished_and_cut() -> None:
    async def main() -> None:
        gate = make_gate()
        gate.set_backend_ready(True)
        cut_seen: list[int] = []
        fast = [await gate.enter(gate.deadline()) for _ in range(3)]
        slow = [await gate.enter(gate.deadline()) for _ in range(2)]
        for i, t in enumerate(slow):
            t.cancel = lambda t=t, i=i: (cut_seen.append(i), t.done())
        for t in fast:
            asyncio.get_running_loop().call_later(0.1, t.done)
        result = await gate.drain(0.4, lease_s=10)
        assert (result.drained, result.cut) == (3, 2)
        assert sorted(cut_seen) == [0, 1]
        assert 0.35 < result.duration_s < 5  # the drain timeout, never the lease (10 s)
        assert not gate.is_open and gate.inflight == 0
        gate.release(result.hold_id)
        assert gate.is_open

    run(main())


def test_drain_with_nothing_in_flight_is_immediate() -> None:
    async def main() -> None:
        gate = make_gate()
        gate.set_backend_ready(True)
        result = await gate.drain(5, lease_s=10)
        assert (result.drained, result.cut) == (0, 0) and result.duration_s < 1  # not the 5 s timeout

    run(main())


def test_a_hold_whose_switch_died_with_nothing_ready_refuses_held_and_new_requests_at_once() -> None:
    """`up` killed while nothing serves: its hold's lease runs out (or its tether closes), a
    fresh probe finds nothing ready, and the held and new requests get 503 naming the repair,
    not after hold_timeout (15 minutes by default)."""

    async def main() -> None:
        gate = make_gate(hold_timeout=900.0)
        probed: list[bool] = []

        async def nothing_ready() -> bool:
            probed.append(False)
            return False

        gate.probe = nothing_ready
        gate.add_hold(lease_s=0.2, owner="up")
        held = asyncio.create_task(gate.enter(gate.deadline()))
        await asyncio.sleep(0)
        assert gate.held == 1
        with pytest.raises(Refused) as raised:
            await held  # once the lease runs out unrenewed: at once, not after 900 s
        assert raised.value.status == 503 and raised.value.reason == "abandoned"
        assert "`compose-spec up`" in str(raised.value) and probed == [False]
        with pytest.raises(Refused, match="compose-spec up"):
            await gate.enter(gate.deadline())  # a new request too
        assert gate.snapshot()["abandoned"] is True
        # a new switch holds again; a backend that becomes ready serves
        gate.add_hold(lease_s=30.0, owner="up")
        assert not gate.abandoned
        gate.release()
        gate.set_backend_ready(True)
        (await gate.enter(gate.deadline())).done()

    run(main())


def test_a_switch_that_died_while_something_still_serves_or_another_holds_abandons_nothing() -> None:
    async def main() -> None:
        gate = make_gate()
        ready = [True]

        async def probe() -> bool:
            return ready[0]

        gate.probe = probe
        gate.add_hold(lease_s=30.0, owner="up")
        gate.hold_abandoned()  # the tether closed: the old variant still answers
        await asyncio.sleep(0.01)
        assert not gate.abandoned and gate._checking is None
        gate.release()
        gate.hold_abandoned()
        await asyncio.sleep(0.01)
        assert not gate.abandoned  # ready on the fresh probe: held requests flow when it says so
        ready[0] = False
        gate.add_hold(lease_s=30.0, owner="other")
        gate.hold_abandoned()  # another hold is set: its switch runs
        assert gate._checking is None and not gate.abandoned
        gate.release()
        gate.set_backend_ready(True)
        gate.hold_abandoned()
        await asyncio.sleep(0.01)
        assert not gate.abandoned  # the poller says ready meanwhile

    run(main())
