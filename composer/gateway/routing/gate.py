"""Admission of requests: hold while no backend is ready or a control hold is set, then release
in arrival order; count what is in flight; drain it.

Pure asyncio, no HTTP: the proxy asks `Gate.enter()` for a `Ticket` before it forwards a
request and calls `Ticket.done()` when the response is over. Waiting is bounded by a deadline
(`Refused("hold_timeout")`, answered 503) and by `max_held` (`Refused("queue_full")`, 429).
Control holds carry a lease: a hold that is not renewed expires, so a crashed controller
cannot leave the port held for ever. A hold that ends without its holder's word (its lease
ran out, or its tether closed: the switch's process died) while a fresh probe finds nothing
ready leaves the gate `abandoned`: held and new requests are answered 503 at once, naming
the command that repairs it, until a backend is ready or a new hold is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from composer.gateway.status.metrics import Metrics
from composer.gateway.wire import DrainReport

log = logging.getLogger("gateway")

# How long the releaser waits for one released request to reach the backend before it
# releases the next one (keeps arrival order on the wire without serialising slow requests).
RELEASE_PACE_S = 0.05
# How long a drain waits for cut requests to unwind after it cancels them.
CUT_GRACE_S = 2.0


class Refused(Exception):
    """The gateway answers this request itself: `reason` is a metrics label."""

    def __init__(self, reason: str, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after  # seconds for Retry-After (None: the gateway's default)


ABANDONED = (
    "no variant serves: the switch that held requests for one ended without finishing (it "
    "failed, or its process died); run `compose-spec up` to repair it"
)


def abandoned() -> Refused:
    """The answer while a dead switch left nothing serving (`Gate.abandon`)."""
    return Refused("abandoned", 503, ABANDONED)


def stopping() -> Refused:
    """The answer to a request held (or arriving) while the gateway stops."""
    return Refused("stopping", 503, "the gateway is stopping (restart, recreate or down); retry shortly")


class ClientGone(Exception):
    """The client disconnected while its request was waiting."""


class UnknownHold(KeyError):
    """No hold with this id (released or expired)."""


@dataclass
class Hold:
    """A control hold: requests wait while it exists; it expires at `expires_at` (monotonic)."""

    id: str
    owner: str
    lease_s: float
    expires_at: float
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    probe_token: str = field(default="", repr=False)  # lets the holder's probes pass the hold

    def describe(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "lease_s": self.lease_s,
            "expires_in_s": round(max(0.0, self.expires_at - now), 3),
        }


class Ticket:
    """One admitted request, in flight until `done()`; a drain may `cut()` it, or pause its
    stream (`paused`: it goes on elsewhere, so it is not counted as drained)."""

    __slots__ = ("_dispatched", "_gate", "cancel", "cut_requested", "finished", "paused")

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._dispatched: asyncio.Event | None = None
        self.cancel: Any = None  # a callable set by the proxy while it forwards
        self.cut_requested = False
        self.finished = False
        self.paused = False

    def mark_dispatched(self) -> None:
        """The request reached the backend (or failed to): the releaser may release the next one."""
        if self._dispatched is not None:
            self._dispatched.set()

    def cut(self) -> None:
        """Abort the forwarding of this request (a drain timed out)."""
        self.cut_requested = True
        if self.cancel is not None:
            self.cancel()

    def done(self, *, completed: bool = True) -> None:
        """The request is over (`completed=False`: it goes back to the queue and is not 'drained')."""
        if not self.finished:
            self.finished = True
            self.mark_dispatched()
            self._gate._finish(self, completed)


class Gate:
    """Holds, queue and in-flight accounting for one gateway (one event loop)."""

    def __init__(self, *, max_held: int, hold_timeout: float, retry_after: int, metrics: Metrics) -> None:
        self.max_held = max_held
        self.hold_timeout = hold_timeout
        self.retry_after = retry_after
        self.metrics = metrics
        self.backend_ready = False  # as the readiness poller last reported it
        self._holds: dict[str, Hold] = {}
        self._waiters: deque[asyncio.Future[Ticket]] = deque()
        self._inflight: set[Ticket] = set()
        self._draining: set[Ticket] | None = None
        self._drain_finished = 0
        self._idle: asyncio.Event | None = None
        self._releaser: asyncio.Task[None] | None = None
        self.stopping = False
        self._pinned: set[str] = set()  # holds of drains under way: their lease starts at the end
        self.abandoned = False  # a dead switch left nothing serving: requests are refused at once
        self.probe: Callable[[], Awaitable[bool]] | None = None  # a fresh probe: is any backend ready?
        self._checking: asyncio.Task[None] | None = None

    @property
    def is_open(self) -> bool:
        """True when requests may pass: the backend is ready and no control hold is set."""
        return self.backend_ready and not self._holds

    @property
    def held(self) -> int:
        """Requests waiting now."""
        return len(self._waiters)

    @property
    def inflight(self) -> int:
        """Requests forwarded and not finished."""
        return len(self._inflight)

    def _passes(self) -> bool:
        """True when a request arriving now is admitted at once: open, and nobody waits before it."""
        return self.is_open and not self._waiters and self._releaser is None

    def would_hold(self) -> bool:
        """True when a request arriving now would wait (or be refused) rather than pass."""
        return self.stopping or not self._passes()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "open": self.is_open,
            "backend_ready": self.backend_ready,
            "holds": [h.describe(now) for h in self._holds.values()],
            "held": self.held,
            "inflight": self.inflight,
            "max_held": self.max_held,
            "hold_timeout_s": self.hold_timeout,
            "abandoned": self.abandoned,
        }

    def set_backend_ready(self, ready: bool) -> None:
        """Record the backend's readiness; becoming ready releases held requests."""
        if ready:
            self.abandoned = False
        if ready == self.backend_ready:
            return
        self.backend_ready = ready
        self.metrics.backend_ready.set(1 if ready else 0)
        log.info("backend %s", "ready" if ready else "not ready: holding new requests")
        self._kick()

    def deadline(self) -> float:
        """The monotonic time until which a request arriving now may be held."""
        return time.monotonic() + self.hold_timeout

    def _admit(self) -> Ticket:
        ticket = Ticket(self)
        self._inflight.add(ticket)
        self.metrics.inflight.inc()
        if self._idle is not None:
            self._idle.clear()
        return ticket

    async def enter(
        self,
        deadline: float,
        *,
        front: bool = False,
        disconnected: Awaitable[Any] | None = None,
        hold: bool = True,
    ) -> Ticket:
        """Wait for a turn and return a ticket; raise `Refused` or `ClientGone` (`disconnected`
        completed). `front`: at the head of the queue, past `max_held` (it has waited already);
        `hold=False` (no key): refused with 503 rather than wait."""
        if self._passes():
            # even while stopping: a request on a connection this gateway accepted before it
            # closed its listener is served (a graceful stop, and a replacement's hand-over)
            return self._admit()
        if self.stopping:
            raise stopping()
        if self.abandoned:
            raise abandoned()
        if not hold:
            raise Refused("not_ready", 503, "no backend is ready (requests without the key are not held)")
        if not front and len(self._waiters) >= self.max_held:
            raise Refused(
                "queue_full",
                429,
                f"the hold queue is full ({len(self._waiters)} requests wait for a ready backend, "
                f"max_held={self.max_held})",
            )
        fut: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        (self._waiters.appendleft if front else self._waiters.append)(fut)
        self.metrics.held.inc()
        started = time.monotonic()
        self._kick()
        waits: set[asyncio.Future[Any]] = {fut}
        if disconnected is not None:
            waits.add(asyncio.ensure_future(disconnected))
        try:
            timeout = max(0.0, deadline - started)
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._abandon(fut)
            raise
        finally:
            self.metrics.held.dec()
            self.metrics.hold_seconds.observe(time.monotonic() - started)
            for w in waits:
                if w is not fut and not w.done():
                    w.cancel()
        if fut.done() and not fut.cancelled():
            return fut.result()  # raises Refused when the gateway stopped meanwhile
        self._abandon(fut)
        if len(done) > 0:
            raise ClientGone()
        raise Refused(
            "hold_timeout", 503, f"no backend became ready within hold_timeout={self.hold_timeout:g}s"
        )

    def stop(self) -> None:
        """The gateway is stopping: every held request, and every new one that would wait, is
        answered 503 (one that passes at once is served)."""
        self.stopping = True
        self._refuse_waiters(stopping)

    def _refuse_waiters(self, answer: Callable[[], Refused]) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(answer())

    def hold_abandoned(self) -> None:
        """A hold ended without its holder's word (its switch died): once no hold is left, probe
        the backends afresh (`probe`) and, when none is ready, `abandon`."""
        probe = self.probe
        if self._holds or probe is None or self._checking is not None:
            return

        async def check() -> None:
            try:
                ready = await probe()
            finally:
                self._checking = None
            if not ready and not self.backend_ready and not self._holds:
                self.abandon()

        self._checking = asyncio.get_running_loop().create_task(check())

    def abandon(self) -> None:
        """Nothing serves and the switch that held for it is gone, so nothing is starting: held
        and new requests get 503 at once (not after hold_timeout) with the repair command."""
        if not self.abandoned:
            log.warning("a switch ended unfinished and no backend is ready: refusing requests")
        self.abandoned = True
        self._refuse_waiters(abandoned)

    def _abandon(self, fut: asyncio.Future[Ticket]) -> None:
        """Take a waiter out of the queue; a ticket it was already given is returned."""
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            fut.result().done(completed=False)
            return
        fut.cancel()
        with contextlib.suppress(ValueError):
            self._waiters.remove(fut)

    def _kick(self) -> None:
        if self.is_open and self._waiters and self._releaser is None:
            self._releaser = asyncio.get_running_loop().create_task(self._release_in_order())

    async def _release_in_order(self) -> None:
        """Release waiters one by one, each once the previous one has reached the backend."""
        try:
            while self.is_open and self._waiters:
                fut = self._waiters.popleft()
                if fut.done():
                    continue
                ticket = self._admit()
                ticket._dispatched = asyncio.Event()
                fut.set_result(ticket)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ticket._dispatched.wait(), RELEASE_PACE_S)
        finally:
            self._releaser = None
        self._kick()

    def _finish(self, ticket: Ticket, completed: bool) -> None:
        self._inflight.discard(ticket)
        self.metrics.inflight.dec()
        if self._draining is not None and ticket in self._draining:
            self._draining.discard(ticket)
            if completed and not ticket.cut_requested and not ticket.paused:
                self._drain_finished += 1
        if not self._inflight and self._idle is not None:
            self._idle.set()

    def add_hold(self, lease_s: float, owner: str = "", probe_token: str = "") -> Hold:
        """Set a hold that expires after `lease_s` unless renewed; requests with `probe_token` pass it."""
        now = time.monotonic()
        hold = Hold(secrets.token_hex(6), owner or "control", lease_s, now + lease_s, probe_token=probe_token)
        self._holds[hold.id] = hold
        self.abandoned = False  # a switch runs again
        self._arm(hold)
        self.metrics.hold_active.set(1)
        log.info("hold %s set by %s (lease %.0fs)", hold.id, hold.owner, lease_s)
        return hold

    def renew(self, hold_id: str, lease_s: float | None = None) -> Hold:
        """Extend a hold's lease from now on."""
        hold = self._holds.get(hold_id)
        if hold is None:
            raise UnknownHold(hold_id)
        if lease_s is not None:
            hold.lease_s = lease_s
        hold.expires_at = time.monotonic() + hold.lease_s
        self._arm(hold)
        return hold

    def release(self, hold_id: str | None = None) -> list[str]:
        """Remove one hold (or all when `hold_id` is None); held requests flow when none is left."""
        if hold_id is not None and hold_id not in self._holds:
            raise UnknownHold(hold_id)
        ids = [hold_id] if hold_id is not None else list(self._holds)
        for hid in ids:
            hold = self._holds.pop(hid)
            if hold.timer is not None:
                hold.timer.cancel()
            log.info("hold %s released", hid)
        self._after_holds_changed()
        return ids

    def probe_allowed(self, token: bytes) -> bool:
        """True when `token` is the probe token of a live hold (constant time: every hold is compared)."""
        matches = [
            hmac.compare_digest(h.probe_token.encode(), token) for h in self._holds.values() if h.probe_token
        ]
        return any(matches)

    def _arm(self, hold: Hold) -> None:
        if hold.timer is not None:
            hold.timer.cancel()
        delay = max(0.0, hold.expires_at - time.monotonic())
        hold.timer = asyncio.get_running_loop().call_later(delay, self._expire, hold.id)

    def _expire(self, hold_id: str) -> None:
        hold = self._holds.get(hold_id)
        if hold is None:
            return
        if hold.expires_at > time.monotonic() or hold_id in self._pinned:  # renewed, or draining
            if hold_id in self._pinned:
                hold.expires_at = time.monotonic() + hold.lease_s
            self._arm(hold)
            return
        del self._holds[hold_id]
        log.warning("hold %s of %s expired: lease of %.0fs not renewed", hold_id, hold.owner, hold.lease_s)
        self._after_holds_changed()
        self.hold_abandoned()

    def _after_holds_changed(self) -> None:
        self.metrics.hold_active.set(1 if self._holds else 0)
        self._kick()

    async def drain(
        self,
        timeout: float,
        lease_s: float,
        owner: str = "",
        probe_token: str = "",
        pause: Callable[[], tuple[int, int]] | None = None,
        pause_first: bool = True,
    ) -> DrainReport:
        """Hold new requests, wait until nothing is in flight (cut what is left at `timeout`).

        `pause` (the proxy's `pause_streams`) runs once the hold is set (`pause_first`), else at
        the timeout instead of the cut of those streams. The hold stays set for the caller to
        release; its lease starts when the drain ends."""
        started = time.monotonic()
        hold = self.add_hold(lease_s, owner or "drain", probe_token)
        self._pinned.add(hold.id)
        self.metrics.drains.inc()
        self._draining = set(self._inflight)
        self._drain_finished = 0
        self._idle = asyncio.Event()
        continued, refused = pause() if pause is not None and pause_first else (0, 0)
        if not self._inflight:
            self._idle.set()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout)
            if self._draining and pause is not None and not pause_first:
                continued, refused = pause()
            left = [ticket for ticket in self._draining if not ticket.paused]
            for ticket in left:
                ticket.cut()
            if left:
                try:
                    await asyncio.wait_for(self._idle.wait(), CUT_GRACE_S)
                except TimeoutError:
                    log.warning("drain: %d cut requests still unwinding", self.inflight)
            drained = self._drain_finished
        finally:
            self._draining = None
            self._idle = None
            self._pinned.discard(hold.id)
            with contextlib.suppress(UnknownHold):
                self.renew(hold.id)
        took, cut = round(time.monotonic() - started, 4), len(left)
        self.metrics.drained.inc(drained)
        self.metrics.cut.inc(cut)
        log.info("drain: %d finished, %d cut, %d paused to continue, %.3fs", drained, cut, continued, took)
        return DrainReport(hold.id, drained, cut, took, continued, refused)
