"""Whether a backend still answers while requests wait for its response head.

vLLM answers a non-streamed completion only when it is done, so the wait for a head has no
plain timeout. While requests wait longer than `interval` for a head from one URL, one probe
asks that URL's `/health` every `interval`; a backend that answers none for `timeout` seconds is
unresponsive and its waiting requests end with `Unresponsive` (504). A backend whose
`/is_sleeping` says true will not answer either: `Unresponsive(asleep=True)` at once (503).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp

PROBE_INTERVAL_S = 5.0
MIN_INTERVAL_S = 0.1


class Unresponsive(Exception):
    """The backend answered no `/health` probe for the timeout while a request waited, or
    (`asleep`) it says it sleeps."""

    def __init__(self, asleep: bool = False) -> None:
        super().__init__("asleep" if asleep else "unresponsive")
        self.asleep = asleep


class _Watch:
    """The probe of one backend URL while requests wait on it; `gone` completes when it stops answering."""

    def __init__(self, url: str, session: aiohttp.ClientSession, timeout: float, interval: float) -> None:
        self.users = 0
        loop = asyncio.get_running_loop()
        self.gone: asyncio.Future[bool] = loop.create_future()  # True: asleep
        self._task: asyncio.Task[None] | None = None
        # requests answered within one interval cost no probe (nor a task)
        self._timer: asyncio.TimerHandle | None = loop.call_later(
            interval, self._start, url, session, timeout, interval, loop.time()
        )

    def _start(self, *args: Any) -> None:
        self._timer = None
        self._task = asyncio.ensure_future(self._run(*args))

    async def _run(
        self, url: str, session: aiohttp.ClientSession, timeout: float, interval: float, answered: float
    ) -> None:
        loop = asyncio.get_running_loop()
        probe = aiohttp.ClientTimeout(total=interval)
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                async with session.get(url + "/health", timeout=probe) as reply:
                    await reply.read()
                answered = loop.time()
                # a sleep-mode backend's own answer (a backend without the route is awake)
                async with session.get(url + "/is_sleeping", timeout=probe) as reply:
                    if reply.status == 200 and (await reply.json(content_type=None)).get("is_sleeping"):
                        self.gone.set_result(True)
                        return
            if loop.time() - answered >= timeout:
                self.gone.set_result(False)
                return
            await asyncio.sleep(interval)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


class Liveness:
    """The probes of every backend that requests wait on (`timeout` 0: none)."""

    def __init__(self, timeout: float, session: Callable[[], aiohttp.ClientSession | None]) -> None:
        self.set_timeout(timeout)
        self._session = session
        self._watches: dict[str, _Watch] = {}

    def set_timeout(self, timeout: float) -> None:
        """The timeout for backends watched from now on."""
        self.timeout = timeout
        self.interval = max(MIN_INTERVAL_S, min(PROBE_INTERVAL_S, timeout / 3))

    @contextlib.contextmanager
    def watching(self, url: str) -> Iterator[asyncio.Future[bool] | None]:
        """While a request waits for a head from `url`: a future that completes when the
        backend stops answering (None when off)."""
        session = self._session()
        if not self.timeout or session is None:
            yield None
            return
        watch = self._watches.get(url)
        if watch is None or watch.gone.done():
            watch = self._watches[url] = _Watch(url, session, self.timeout, self.interval)
        watch.users += 1
        try:
            yield watch.gone
        finally:
            watch.users -= 1
            if watch.users == 0:
                watch.stop()
                if self._watches.get(url) is watch:
                    del self._watches[url]
