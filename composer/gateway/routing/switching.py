"""Request-driven switching and the automatic policy, on the gateway's side (asyncio, no HTTP).

The gateway cannot start containers: it raises a *demand* (a variant and a reason, at most one
at a time) that the host's `compose-spec follow` takes through the control channel (`GET
/demand`), runs through the gated `up`, and answers with `POST /serving`.

A request whose model is an alias of variant V goes on at once, renamed to the served name,
when V serves and no switch away from it is under way. Otherwise it waits in V's queue (at
most `max_held`, then 429; bounded by the hold deadline; the whole queue goes on once V serves)
for the switch to V, or for the switch under way to end first, or for another variant's
`min_residency` when it ends within `residency_wait` (else 503 with `Retry-After` = the
residency left); else it raises the demand for V. With no follower (none within
`FOLLOWER_WINDOW_S`), a request that would raise or wait for an untaken demand, or wait out a
residency, gets 503 at once and the automatic policy raises nothing. A failed switch answers
its waiting requests 503 with what failed and starts a residency.

The automatic policy (`tick`) feeds a `policy.Window` and raises a demand when the class of
the current mix names another variant and no residency runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from composer.gateway.config import GatewayConfig
from composer.gateway.routing.gate import Refused, stopping
from composer.gateway.routing.policy import Decision, Window, decide
from composer.gateway.status.metrics import Metrics

log = logging.getLogger("gateway")

MIN_REQUESTS = 3  # requests in the window before the automatic policy decides anything
# A host's `follow` counts as attached while it long-polls and this long after its last poll.
FOLLOWER_WINDOW_S = 30.0


@dataclass
class Demand:
    """A switch the gateway asks the host to make."""

    id: str
    variant: str
    reason: str
    source: str  # "alias" or "auto"
    raised_at: float
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    ok: bool | None = None
    taken: bool = False  # handed to the host (a demand not taken yet may be withdrawn)
    detail: str = ""  # how it ended, as the host reported it (what failed)

    def describe(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "variant": self.variant,
            "reason": self.reason,
            "source": self.source,
            "age_s": round(now - self.raised_at, 3),
        }


class Switcher:
    """The serving variant as the gateway knows it, the pending demand and the residency."""

    def __init__(
        self, config: GatewayConfig, metrics: Metrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.aliases = dict(config.aliases)
        self.serving: str | None = None
        self.demand: Demand | None = None
        self.last_switch: float | None = None
        self.window = Window(config.policy_window)
        self.last_decision: str | None = None
        self.queued: dict[str, int] = {}  # requests waiting for a switch, per variant
        self.last_contact: float | None = None  # a follower's last long poll or demand report
        self._polls = 0  # long polls in progress
        self.stopping = False
        self._pulse = asyncio.Event()

    def configure(self, config: GatewayConfig) -> None:
        """New settings (applied in place): aliases, policy, residency and window from now on."""
        self.config = config
        self.aliases = dict(config.aliases)
        self.window.seconds = config.policy_window

    def _notify(self) -> None:
        self._pulse.set()
        self._pulse = asyncio.Event()

    def residency_left(self, now: float | None = None) -> float:
        """Seconds before another switch may start (a switch under way counts a full residency)."""
        now = self.clock() if now is None else now
        if self.demand is not None:
            return self.config.min_residency
        if self.last_switch is None:
            return 0.0
        return max(0.0, self.last_switch + self.config.min_residency - now)

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready state for the control channel."""
        now = self.clock()
        return {
            "serving_variant": self.serving,
            "demand": self.demand.describe(now) if self.demand else None,
            "residency_left_s": round(self.residency_left(now), 3),
            "policy": self.config.policy,
            "last_decision": self.last_decision,
            "follower_attached": self.follower_attached(now),
            "follower_seen_s_ago": None if self.last_contact is None else round(now - self.last_contact, 3),
        }

    async def _wait_change(self, timeout: float) -> None:
        pulse = self._pulse
        if timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pulse.wait(), timeout)

    def raise_demand(self, variant: str, reason: str, source: str) -> None:
        """Ask the host for `variant` (unless a demand is pending)."""
        if self.demand is not None:
            return
        self.demand = Demand(secrets.token_hex(6), variant, reason, source, self.clock())
        self.metrics.switch_demands.labels(source).inc()
        log.info("switch demand %s -> %s (%s): %s", self.serving or "?", variant, source, reason)
        self._notify()

    async def next_demand(self, wait_s: float) -> Demand | None:
        """The pending demand, waiting up to `wait_s` for one (the host's long poll)."""
        deadline = self.clock() + wait_s
        self.last_contact = self.clock()
        self._polls += 1
        try:
            while self.demand is None:
                left = deadline - self.clock()
                if left <= 0:
                    return None
                await self._wait_change(left)
        finally:
            self._polls -= 1
            self.last_contact = self.clock()
        self.demand.taken = True
        return self.demand

    def withdraw(self, why: str) -> None:
        """Drop an automatic demand no host has taken yet (the traffic changed or stopped)."""
        demand = self.demand
        if demand is None or demand.taken or demand.source != "auto":
            return
        self.demand = None
        demand.ok = False
        demand.done.set()
        self.metrics.switch_withdrawn.inc()
        log.info("switch demand -> %s withdrawn: %s", demand.variant, why)
        self._notify()

    def report(
        self, variant: str | None, demand_id: str | None, ok: bool, detail: str = "", follower: bool = False
    ) -> None:
        """The host says what serves now, and how the demand `demand_id` ended (a report on a
        demand, or a `follower`'s, counts as a follower's contact; `up`'s does not)."""
        now = self.clock()
        if demand_id is not None or follower:
            self.last_contact = now
        previous = self.serving
        if variant:
            self.serving = variant
        demand = self.demand
        if demand is not None and demand_id == demand.id:
            demand.ok = ok
            demand.detail = detail
            demand.done.set()
            self.demand = None
            self.last_switch = now
            self.window.clear()
            outcome = "ok" if ok else "failed"
            self.metrics.switches.labels(demand.source, outcome).inc()
            log.info(
                "switch %s -> %s %s after %.1fs%s",
                previous or "?",
                demand.variant,
                outcome,
                now - demand.raised_at,
                f": {detail}" if detail else "",
            )
        elif variant and previous is not None and variant != previous:
            self.last_switch = now  # switched by hand: the residency applies too
            self.window.clear()
            if demand is None or demand.variant != variant:  # else the swap for the demand reports
                log.info("serving variant is now %s (switched outside the gateway)", variant)
        self._notify()

    def alias_variant(self, model: str | None) -> str | None:
        """The variant an alias names (None for the served name or any other model)."""
        return self.aliases.get(model) if model else None

    def serves(self, variant: str) -> bool:
        """True when a request for `variant` may go on now: it serves and no switch away from it
        is under way (a demand the host has not taken yet leaves it serving)."""
        demand = self.demand
        return self.serving == variant and (demand is None or not demand.taken or demand.variant == variant)

    def follower_attached(self, now: float | None = None) -> bool:
        """True while a host's `follow` long-polls (or did within `FOLLOWER_WINDOW_S`)."""
        now = self.clock() if now is None else now
        return self._polls > 0 or (
            self.last_contact is not None and now - self.last_contact <= FOLLOWER_WINDOW_S
        )

    def _no_follower(self, variant: str) -> Refused:
        return Refused(
            "no_follower",
            503,
            f"no compose-spec follow is running for this stack: nothing can switch to {variant} "
            "(start `compose-spec follow`, or name the served model)",
        )

    async def admit(self, variant: str, alias: str, deadline: float) -> None:
        """Return once `variant` serves; raise `Refused` (429: its queue is full; 503: timeout,
        failure, a residency longer than the request may wait, or no follower)."""
        if self.serves(variant):
            return
        waiting = self.queued.get(variant, 0)
        if waiting >= self.config.max_held:
            raise Refused(
                "queue_full",
                429,
                f"the queue for {variant} is full ({waiting} requests wait for a switch to it, "
                f"max_held={self.config.max_held})",
                retry_after=max(1, math.ceil(self.residency_left())),
            )
        self.queued[variant] = waiting + 1
        try:
            await self._wait_for(variant, alias, deadline)
        finally:
            self.queued[variant] -= 1

    def stop(self) -> None:
        """The gateway is stopping: requests waiting for a switch are answered 503."""
        self.stopping = True
        self._notify()
        if self.demand is not None:
            self.demand.done.set()  # its waiters look again and see `stopping`

    async def _wait_for(self, variant: str, alias: str, deadline: float) -> None:
        while True:
            if self.stopping:
                raise stopping()
            now = self.clock()
            demand = self.demand
            if self.serves(variant):
                return
            if deadline <= now:
                raise Refused(
                    "hold_timeout",
                    503,
                    f"no switch to {variant} within hold_timeout={self.config.hold_timeout:g}s",
                )
            if demand is not None and demand.variant == variant:
                if not demand.taken and not self.follower_attached(now):
                    raise self._no_follower(variant)
                try:
                    await asyncio.wait_for(demand.done.wait(), min(deadline - now, FOLLOWER_WINDOW_S))
                except TimeoutError:
                    continue
                if self.stopping:
                    raise stopping()
                if not demand.ok:
                    raise Refused(
                        "switch_failed",
                        503,
                        f"the switch to {variant} failed" + (f": {demand.detail}" if demand.detail else ""),
                        retry_after=max(1, math.ceil(self.config.min_residency)),
                    )
                continue
            if demand is not None:  # a switch to another variant first: wait for it to end
                await self._wait_change(deadline - now)
                continue
            if not self.follower_attached(now):  # nothing could switch, at the residency's end either
                raise self._no_follower(variant)
            left = self.residency_left(now)
            if left > 0:
                if left > self.config.residency_wait or now + left > deadline:
                    raise Refused(
                        "residency",
                        503,
                        f"{self.serving} serves for another {left:.0f}s (min_residency="
                        f"{self.config.min_residency:g}s), longer than a request for {variant} may wait; "
                        f"retry for {variant} later",
                        retry_after=max(1, math.ceil(left)),
                    )
                await self._wait_change(min(left, deadline - now))
                continue
            self.raise_demand(variant, f"a request names alias {alias!r}", "alias")

    def observe(self, prompt_tokens: int) -> None:
        """A request's estimated prompt size, for the window."""
        self.window.add_request(self.clock(), prompt_tokens)

    def tick(self, outstanding: int) -> Decision | None:
        """One policy step: sample the concurrency, and raise a demand when the mix says so."""
        now = self.clock()
        self.window.sample(now, outstanding)
        if self.config.policy != "auto":
            return None
        decision = decide(self.config.workloads, self.window.mix(now, MIN_REQUESTS), self.serving)
        if decision is None:
            self.withdraw("no traffic in the window")
            return None
        if self.demand is not None and decision.variant != self.demand.variant:
            self.withdraw(decision.reason)
        wanted = self.demand.variant if self.demand else self.serving
        if decision.variant == wanted:
            self._note(f"keep {decision.variant}: {decision.reason}", decision.workload)
            return decision
        left = self.residency_left(now)
        if left > 0:
            self._note(f"wait {left:.0f}s of min_residency: {decision.reason}", decision.workload)
            return decision
        if not self.follower_attached(now):
            self._note(
                f"no compose-spec follow is running for this stack: {decision.reason}", decision.workload
            )
            return decision
        self.last_decision = decision.reason
        self.raise_demand(decision.variant, decision.reason, "auto")
        return decision

    def _note(self, line: str, workload: str) -> None:
        """Log a policy line when its conclusion changed (not on every tick)."""
        key = f"{workload}:{line.split(':', 1)[0].split(' ')[0]}"
        if key != getattr(self, "_last_note", None):
            self._last_note = key
            log.info("policy: %s", line)
        self.last_decision = line
