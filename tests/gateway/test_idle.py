"""An idle gateway wakes for its work only: its servers sleep until they are stopped, its
readiness poller between probes until a probe is due or asked for."""

from __future__ import annotations

import asyncio
import threading

import uvicorn

from composer.gateway.routing.upstream import Upstream
from composer.gateway.runtime import _Server


async def _app(scope, receive, send) -> None:  # never called
    raise AssertionError(scope)


def test_a_server_s_main_loop_sleeps_until_it_is_stopped_from_another_thread() -> None:
    """uvicorn's main loop ticks every 0.1 s to look at `should_exit`; the gateway's ticks once
    to start and once to stop, however long it runs, and a stop from another thread ends it."""
    config = uvicorn.Config(_app, lifespan="off", log_level="warning", date_header=False)  # as the gateway's
    config.load()
    server = _Server(config)
    ticks: list[int] = []
    tick = server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(counter)
        return await tick(counter)

    server.on_tick = counted  # type: ignore[method-assign]

    async def run() -> None:
        main = asyncio.ensure_future(server.main_loop())
        while server._exit is None:  # waiting
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.35)  # uvicorn's would have ticked three times by now
        threading.Thread(target=setattr, args=(server, "should_exit", True)).start()
        await asyncio.wait_for(main, 30)

    asyncio.run(asyncio.wait_for(run(), 30))
    assert len(ticks) == 2 and server.should_exit


def test_a_mark_down_wakes_the_poller_at_once_between_slow_probes() -> None:
    poller = Upstream("http://127.0.0.1:9", on_ready=lambda _: None, poll_interval=0.05)
    poller.ready_interval = 3600.0
    probes: list[int] = []

    async def probe() -> bool:
        probes.append(1)
        return True

    poller.probe = probe  # type: ignore[method-assign]

    async def run() -> None:
        task = asyncio.ensure_future(poller.run())
        try:
            while poller._waiter is None:  # the first probe done, napping
                await asyncio.sleep(0.01)
            assert len(probes) == 1
            poller.mark_down("test")
            while len(probes) < 2:
                await asyncio.sleep(0.01)
            assert poller.ready
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await poller.aclose()

    asyncio.run(asyncio.wait_for(run(), 30))
