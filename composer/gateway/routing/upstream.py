"""A member's backend (`live.Member`) and the poller that tracks whether it is ready.

Ready means `GET /health` answers 200 and, with a served name, `GET /v1/models` lists it
(once per ready period). The poller probes every `poll_interval` seconds while the backend is
not ready or requests are held (`urgent()`), else every `ready_interval` seconds (each probe is
a line in vLLM's access log); the proxy's `mark_down` wakes it at once.

Sleep-mode backends (`candidates`, GATEWAY_UPSTREAM_CANDIDATES) are ready only while `GET
/is_sleeping` says false (`/health` answers 200 while vLLM sleeps). Until the first `route()`
(a gateway that just started), a configured upstream that is not ready is replaced by the
first candidate that answers healthy and awake.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import httpx

log = logging.getLogger("gateway")

PROBE_TIMEOUT = httpx.Timeout(2.0, connect=1.0)
READY_POLL_INTERVAL = 2.0


class Upstream:
    """Current upstream URL plus its readiness, reported to `on_ready(bool)` on every change."""

    def __init__(
        self,
        url: str,
        *,
        on_ready: Callable[[bool], None],
        on_route: Callable[[str | None, str], None] | None = None,
        served_name: str = "",
        api_key: str = "",
        poll_interval: float = 0.1,
        urgent: Callable[[], bool] | None = None,
        candidates: Sequence[str] = (),
        backoff_max: float = 0.0,
    ) -> None:
        self.url = url  # the base URL requests go to now
        self.candidates = tuple(candidates)
        self._routed = False  # True after the first route(): no more rediscovery
        self._on_ready = on_ready
        self._on_route = on_route or (lambda old, new: None)
        self.served_name = served_name
        self.poll_interval = poll_interval
        self.ready_interval = max(READY_POLL_INTERVAL, poll_interval)
        self._urgent = urgent or (lambda: False)
        self.backoff_max = max(backoff_max, poll_interval)
        self._failures = 0  # probes failed in a row (the backoff's exponent)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            timeout=PROBE_TIMEOUT,
            limits=httpx.Limits(max_connections=2, max_keepalive_connections=1),
        )
        self.ready = False  # as of the last probe (or the last `mark_down`)
        self._listed = False
        self._woken = False  # `route` or `mark_down` asked for a probe now
        self._waiter: asyncio.Future[None] | None = None  # the poller's wait between probes
        self.last_error = ""
        self._on_route(None, url)

    def route(self, url: str) -> str:
        """Send new requests to `url` (not ready until probed); returns the old URL."""
        old = self.url
        self.url = url
        self._routed = True
        self._listed = False
        self._set_ready(False)
        self._on_route(old, url)
        log.info("route: %s -> %s", old, url)
        self._wake()
        return old

    def assume_ready(self) -> None:
        """The host gated this backend before handing it over: ready now, probed as usual."""
        self._listed = True
        self._failures = 0
        self._set_ready(True)

    def mark_down(self, reason: str) -> None:
        """The proxy could not reach the backend: hold new requests until the poller sees it ready."""
        if self.ready:
            log.info("backend unreachable (%s)", reason)
        self.last_error = reason
        self._listed = False
        self._set_ready(False)
        self._wake()

    def _wake(self) -> None:
        """Probe now: end the poller's wait."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _set_ready(self, ready: bool) -> None:
        self.ready = ready
        self._on_ready(ready)

    async def probe(self) -> bool:
        """One readiness check of the current upstream."""
        url = self.url
        try:
            health = await self._client.get(f"{url}/health")
            if health.status_code != 200:
                self.last_error = f"/health answered {health.status_code}"
                self._listed = False
                return False
            if url in self.candidates and await self._asleep(url):
                self.last_error = "the backend is asleep (/is_sleeping: true)"
                self._listed = False
                return False
            if self.served_name and not self._listed:
                models = await self._client.get(f"{url}/v1/models", headers=self._headers)
                ids = (
                    [m.get("id") for m in models.json().get("data", [])] if models.status_code == 200 else []
                )
                if self.served_name not in ids:
                    self.last_error = (
                        f"/v1/models does not list {self.served_name!r} (status {models.status_code})"
                    )
                    return False
                self._listed = True
        except (httpx.HTTPError, ValueError, AttributeError) as err:
            self.last_error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            self._listed = False
            return False
        if url != self.url:  # routed elsewhere while probing
            return False
        self.last_error = ""
        return True

    async def _asleep(self, url: str) -> bool:
        """A sleep-mode backend's own answer; a backend without the route counts as awake."""
        reply = await self._client.get(f"{url}/is_sleeping")
        return reply.status_code == 200 and bool(reply.json().get("is_sleeping"))

    async def _awake(self, url: str) -> bool:
        try:
            health = await self._client.get(f"{url}/health")
            return health.status_code == 200 and not await self._asleep(url)
        except (httpx.HTTPError, ValueError, AttributeError):
            return False

    async def rediscover(self) -> str | None:
        """Before any route(): move to the first candidate that is healthy and awake."""
        if self._routed:
            return None
        for url in self.candidates:
            if url != self.url and await self._awake(url) and not self._routed:
                old, self.url, self._listed = self.url, url, False
                self._on_route(old, url)
                log.info("upstream %s is not ready; found %s healthy and awake", old, url)
                return url
        return None

    def _interval(self) -> float:
        """Seconds to the next probe: `poll_interval` while urgent; while not ready, doubling
        from `poll_interval` up to `backoff_max` per failed probe; else `ready_interval`."""
        if self._urgent():
            return self.poll_interval
        if not self.ready:
            return min(self.backoff_max, self.poll_interval * 2 ** min(self._failures - 1, 20))
        return self.ready_interval

    async def run(self) -> None:
        """Poll for ever (cancel the task to stop), every `_interval()` seconds; at once when
        woken by `route` or `mark_down`."""
        loop = asyncio.get_running_loop()
        while True:
            self._woken = False
            ready = await self.probe()
            if not ready and self.candidates and await self.rediscover():
                ready = await self.probe()
            self._failures = 0 if ready else self._failures + 1
            self._set_ready(ready)
            next_probe = loop.time() + self._interval()
            while not self._woken:
                left = next_probe - loop.time()
                if left <= 0:
                    break
                await self._nap(loop, min(left, self.poll_interval))
                if self._urgent():  # requests are held now: probe within one poll interval
                    next_probe = min(next_probe, loop.time())

    async def _nap(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        """Wait `seconds`, or until `_wake`: a future and a timer (`asyncio.wait_for` made a
        task and a timeout each time, about 0.3 ms of CPU at 10 waits a second)."""
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(seconds, _settle, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def aclose(self) -> None:
        """Close the probe client."""
        await self._client.aclose()


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
