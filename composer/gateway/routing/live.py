"""The upstreams the gateway forwards to: a set of `Member`s, every request goes to one.

Without a published live set it is the set of one: the `single` member (`GATEWAY_UPSTREAM`,
then the URL `POST /upstreams {"single": {"url"}}` routes it to). A live set
(`GATEWAY_LIVE_UPSTREAMS`, `POST /upstreams`) replaces it; an empty one brings it back. Every
member has one readiness watcher (`upstream.Upstream`), one outstanding count and the same
routing and failover; a member the proxy cannot reach is out (`Upstream.mark_down`) until a
probe passes. The state's `upstreams` shows every member requests go to, the single one too,
then those leaving; a live member is also `listed` (`gateway_live_*{upstream}`, `x-served-by`).

`replace()` keeps the members that stay (same name and URL); new ones from the control channel
count as ready at once (the host gated them), new ones from the settings are probed first;
members that leave stay listed (`leaving`) until their requests finish (`wait_gone()`).

What serves is the members' variants (`variants()`): the live set's, or the single member's
(named by `name_single()` when the host reports it). Every change of the set, of the single
member's URL or of its variant counts one `generation` and calls `on_change` (the gateway keeps
`record()` in its state folder, and a restart or a replacement reads it back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import replace as with_fields
from typing import Any

from composer.gateway.config import GatewayConfig, LiveSpec
from composer.gateway.routing.routing import View, choose_upstream
from composer.gateway.routing.upstream import Upstream
from composer.gateway.status.metrics import Metrics
from composer.gateway.wire import SINGLE

log = logging.getLogger("gateway")

# False while the request being forwarded is a status probe (`client.STATUS_PROBE_HEADER`, set
# by the public app): in flight on its member, but neither a request nor served.
COUNTED: ContextVar[bool] = ContextVar("counted", default=True)

BACKOFF_MAX_S = 2.0
LAST_MINUTE_S = 60.0


def once(action: Callable[..., None]) -> Callable[..., None]:
    """`action`, run on the first call only."""
    called = False

    def run(*args: Any) -> None:
        nonlocal called
        if not called:
            called = True
            action(*args)

    return run


class Member:
    """One upstream: its spec, its poller and its request counters; `listed`: a member of a
    published live set (listed in the state, with metric series of its own)."""

    def __init__(self, spec: LiveSpec, poller: Upstream, metrics: Metrics, listed: bool = True) -> None:
        self.spec = spec
        self.name = spec.name
        self.poller = poller
        self.metrics = metrics
        self.listed = listed
        self.outstanding = 0
        self.requests = 0
        self.served = 0
        self.errors = 0
        self.spilled = 0
        self.recent: deque[float] = deque()  # monotonic end times of served requests
        self.leaving = False
        self.task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return self.poller.url  # the single member's follows `single.url`

    @property
    def ready(self) -> bool:
        return self.poller.ready and not self.leaving

    def view(self) -> View:
        return View(self.name, self.spec.variant, self.ready, self.outstanding, self.requests, self.spilled)

    def begin(self, spilled: bool = False, counted: bool = True) -> None:
        """A request goes to this member (`spilled`: another variant's overflow; not `counted`:
        a holder's probe, in flight but neither a request nor served)."""
        self.outstanding += 1
        self.spilled += spilled
        if not counted:
            return
        self.requests += 1
        if self.listed:
            self.metrics.live_requests.labels(self.name).inc()
            self.metrics.live_outstanding.labels(self.name).inc()

    def end(self, ok: bool, spilled: bool = False, counted: bool = True) -> None:
        """The request finished (`ok`: answered without a connection failure)."""
        self.outstanding -= 1
        self.spilled -= spilled
        if not counted:
            return
        if ok:
            self.served += 1
            self.recent.append(time.monotonic())
            self.served_last_minute()  # bounded even when nobody asks
        else:
            self.errors += 1
        if self.listed:
            if not ok:
                self.metrics.live_errors.labels(self.name).inc()
            if not self.leaving:
                self.metrics.live_outstanding.labels(self.name).dec()

    def served_last_minute(self) -> int:
        """Requests it answered in the last `LAST_MINUTE_S` seconds."""
        horizon = time.monotonic() - LAST_MINUTE_S
        while self.recent and self.recent[0] < horizon:
            self.recent.popleft()
        return len(self.recent)

    def describe(self) -> dict[str, Any]:
        return {
            **self.spec.describe(),
            "url": self.url,
            "ready": self.ready,
            "outstanding": self.outstanding,
            "requests": self.requests,
            "served": self.served,
            "served_1m": self.served_last_minute(),
            "spilled": self.spilled,
            "errors": self.errors,
            "leaving": self.leaving,
            "error": self.poller.last_error,
        }


class LiveSet:
    """The upstreams requests go to; `on_ready(any_ready)` is called on every readiness change."""

    def __init__(
        self,
        config: GatewayConfig,
        metrics: Metrics,
        on_ready: Callable[[bool], None],
        urgent: Callable[[], bool],
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._on_ready = on_ready
        self._urgent = urgent
        self.members: dict[str, Member] = {}  # the published live set
        self.leaving: list[Member] = []
        self._changed = asyncio.Event()
        self.generation = 0
        self.on_change: Callable[[], None] = lambda: None
        single = LiveSpec(SINGLE, "", config.upstream)
        self.single = self._make(single, config.upstream_candidates, 0.0, self._routed)

    def _routed(self, old: str | None, new: str) -> None:
        """The single member's poller follows another URL (`single.url`, or a candidate found)."""
        self.metrics.set_upstream(old, new)
        self._count()

    def _count(self) -> None:
        self.generation += 1
        self.on_change()

    def name_single(self, variant: str | None) -> None:
        """The host says `variant` is what the single member serves (None or "": unchanged)."""
        if variant and variant != self.single.spec.variant:
            self.single.spec = with_fields(self.single.spec, variant=variant)
            self._count()

    def variants(self) -> list[str]:
        """The variants that serve now, in the set's order (empty: the host has not said)."""
        return list(dict.fromkeys(m.spec.variant for m in self.serving() if m.spec.variant))

    def record(self) -> dict[str, Any]:
        """What serves, JSON-ready: the live set, the single member and the generation."""
        return {
            "generation": self.generation,
            "members": [m.spec.describe() for m in self.members.values()],
            "single": {**self.single.spec.describe(), "url": self.single.url},
        }

    @property
    def active(self) -> bool:
        """True while a live set is published: requests are routed among its members."""
        return bool(self.members)

    def serving(self) -> tuple[Member, ...]:
        """The members requests go to: the live set, or the single member."""
        return tuple(self.members.values()) or (self.single,)

    def any_ready(self) -> bool:
        return any(m.ready for m in self.serving())

    def _member_ready(self, member: Member, ready: bool) -> None:
        if member.listed and not member.leaving:
            self.metrics.live_ready.labels(member.name).set(1 if ready else 0)
        if member in self.serving():
            self._on_ready(self.any_ready())

    def _make(
        self,
        spec: LiveSpec,
        candidates: Sequence[str] | None = None,
        backoff_max: float = BACKOFF_MAX_S,
        on_route: Callable[[str | None, str], None] | None = None,
    ) -> Member:
        """A member and its poller; a live one (`candidates` None: readiness asks its
        /is_sleeping too) is `listed`, with metric series of its own."""
        member: Member
        poller = Upstream(
            spec.url,
            on_ready=lambda ready: self._member_ready(member, ready),
            on_route=on_route,
            served_name=self.config.served_name,
            api_key=self.config.api_key,
            poll_interval=self.config.poll_interval,
            urgent=self._urgent,
            candidates=(spec.url,) if candidates is None else candidates,
            backoff_max=backoff_max,
        )
        member = Member(spec, poller, self.metrics, listed=candidates is None)
        if member.listed:
            self.metrics.live_added(spec.name)
        return member

    def start(self, specs: Sequence[LiveSpec]) -> None:
        """Start with the configured set (inside the serving loop); members are probed first."""
        self.replace(specs, gated=False)

    def replace(self, specs: Sequence[LiveSpec], *, gated: bool = True) -> None:
        """Make `specs` the set (empty: the single member); `gated` members
        count as ready at once (the host gated them)."""
        keep: dict[str, Member] = {}
        for spec in specs:
            old = self.members.get(spec.name)
            if old is not None and old.spec == spec:
                keep[spec.name] = old
                continue
            if old is not None:  # same name, new URL or variant: the old one leaves
                self._leave(old)
            member = self._make(spec)
            keep[spec.name] = member
            if gated:
                member.poller.assume_ready()
            member.task = asyncio.get_running_loop().create_task(member.poller.run())
        for name, old in self.members.items():
            if name not in keep:
                self._leave(old)
        self.members = keep
        # the single member is out of the set (its requests finish, it is not polled) while a
        # live set is published, and back in it when none is
        single = self.single
        single.leaving = bool(keep)
        if single.leaving and single.task is not None:
            single.task.cancel()
            single.task = None
        elif not single.leaving and single.task is None:
            single.task = asyncio.get_running_loop().create_task(single.poller.run())
        log.info("live set: %s", ", ".join(f"{m.name}={m.url}" for m in keep.values()) or "empty")
        self._on_ready(self.any_ready())
        self._reap()
        self._count()

    def _leave(self, member: Member) -> None:
        member.leaving = True
        if member.task is not None:
            member.task.cancel()
        self.leaving.append(member)

    def _reap(self) -> None:
        """Forget leaving members with nothing in flight (and their metric series)."""
        for member in [m for m in self.leaving if m.outstanding <= 0]:
            self.leaving.remove(member)
            if member.name not in self.members:
                self.metrics.live_removed(member.name)
            asyncio.get_running_loop().create_task(member.poller.aclose())
        self._changed.set()  # `wait_gone` looks again
        self._changed = asyncio.Event()

    def left(self, name: str) -> list[Member]:
        """The members out of the set named `name` (the single member while a live set serves)."""
        single = [self.single] if self.single.leaving and name == SINGLE else []
        return [*(m for m in self.leaving if m.name == name), *single]

    async def wait_gone(self, name: str, wait_s: float) -> int:
        """Wait up to `wait_s` until no leaving member named `name` has requests in flight;
        returns how many are still in flight."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (left := sum(m.outstanding for m in self.left(name))) and loop.time() < deadline:
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), deadline - loop.time())
        return left

    def choose(
        self, hint: tuple[str | None, int | None] | None, probe: bool = False
    ) -> tuple[Member, Callable[[bool], None]] | None:
        """The member for a request with this (alias variant, prompt tokens) hint, the request
        counted on it until `release(ok)` (once); None while none is ready, but a holder's
        `probe` (it passes the hold) goes to the least loaded member."""
        alias, tokens = hint or (None, None)
        serving = {m.name: m for m in self.serving()}
        choice = choose_upstream(
            [m.view() for m in serving.values()],
            alias_variant=alias,
            prompt_tokens=tokens,
            classes=self.config.workloads,
            spill=self.config.spill,
        )
        if choice is None:
            if not probe:
                return None
            member, spilled = min(serving.values(), key=lambda m: m.outstanding), False
        else:
            if self.active:
                self.metrics.route_decisions.labels(choice.reason).inc()
            member, spilled = serving[choice.name], choice.reason == "spill"
        counted = not probe and COUNTED.get()
        member.begin(spilled, counted)

        def release(ok: bool) -> None:
            member.end(ok, spilled, counted)
            if member.leaving and member.outstanding <= 0:
                self._reap()  # also when the single member's last request ends: `wait_gone` looks

        return member, once(release)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every member requests go to (the live set, or the single member), then every leaving
        one with requests in flight or still counted, JSON-ready."""
        single = self.single
        gone = (single,) if single.leaving and single.outstanding > 0 else ()
        return [m.describe() for m in (*self.serving(), *self.leaving, *gone)]

    async def aclose(self) -> None:
        """Stop every poller and close its client."""
        for member in (*self.members.values(), *self.leaving, self.single):
            if member.task is not None:
                member.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await member.task
            await member.poller.aclose()
