"""The switches the gateway saw through its control channel: the one under way and a bounded history.

A swap drives the gateway step by step, each step a stage here: `drain` (a drain naming its
target starts a switch), `stop` (the drain is over), `sleep` (a `/sleep` call), `start` (routed
to the new backend, waiting for it), `wake` (a `/wake_up` call), `gate` (the backend is ready).
Releasing the switch's hold ends it with the outcome the host reports (`ok`, `failed`, else
`released`); a hold that expires ends it as `abandoned`. Sleeping variants are those a `/sleep`
during a switch put to sleep and nothing since brought back.

Pure bookkeeping: `clock()` (monotonic) for durations, `wall()` (epoch) for what is shown;
`on_finish` gets the history after each switch and each probation report (`switchstore` keeps
it across restarts). The host's probation, watched after the switch ended, is annotated on the
newest switch (`probation`: `running` until a time, then how it ended).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

KEEP_SWITCHES = 50
# The detail `up` releases a gateway-only update with (its outcome, composer.swap.swapper):
# the variant kept serving, only the gateway's settings changed.
GATEWAY_UPDATED = "gateway updated"


@dataclass
class Switch:
    """One switch as the gateway saw it."""

    source: str  # who drove it (the drain's owner)
    from_variant: str | None
    to_variant: str
    began: float
    started_at: float
    stage: str = "drain"
    stage_began: float = 0.0
    stages: list[tuple[str, float]] = field(default_factory=list)  # finished stages, seconds each
    hold_id: str | None = None
    drained: int | None = None
    cut: int | None = None
    continued: int | None = None  # streams paused at the drain, to go on on the new variant
    refused: int | None = None  # streams in flight it could not continue (they drained)
    outcome: str | None = None
    detail: str = ""
    duration_s: float | None = None
    routed: bool = False  # the gateway was routed to the new backend (its readiness means the gate)

    def enter(self, stage: str, now: float) -> None:
        """Close the current stage and start `stage` (no-op when it is the current one)."""
        if stage == self.stage:
            return
        self.stages.append((self.stage, now - self.stage_began))
        self.stage = stage
        self.stage_began = now

    def describe(self, now: float) -> dict[str, Any]:
        """JSON-ready view (a running switch shows its stage and the seconds so far)."""
        running = self.outcome is None
        stages = [*self.stages, (self.stage, now - self.stage_began)] if running else self.stages
        return {
            "from": self.from_variant,
            "to": self.to_variant,
            "source": self.source,
            "started_at": round(self.started_at, 3),
            "stage": self.stage if running else None,
            "stage_elapsed_s": round(now - self.stage_began, 3) if running else None,
            "elapsed_s": round((now - self.began) if running else (self.duration_s or 0.0), 3),
            "stages": [{"stage": name, "seconds": round(sec, 3)} for name, sec in stages],
            "drained": self.drained,
            "cut": self.cut,
            "continued": self.continued,
            "refused": self.refused,
            "outcome": self.outcome,
            "detail": self.detail,
            "gateway_only": self.detail == GATEWAY_UPDATED,
        }


class SwitchLog:
    """The switch under way (at most one) and the last `keep` finished ones, newest first."""

    def __init__(
        self,
        keep: int = KEEP_SWITCHES,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        history: Iterable[dict[str, Any]] = (),
        on_finish: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.clock = clock
        self.wall = wall
        self.current: Switch | None = None
        self.history: deque[dict[str, Any]] = deque(history, maxlen=keep)  # newest first
        self.on_finish = on_finish
        self.sleeping: list[str] = []

    def begin(self, to_variant: str, from_variant: str | None, source: str) -> Switch:
        """A drain that names its target starts a switch (one still open ends as abandoned)."""
        if self.current is not None:
            self.finish("abandoned", detail="another switch began")
        now = self.clock()
        self.current = Switch(source, from_variant, to_variant, now, self.wall(), stage_began=now)
        return self.current

    def drained(self, hold_id: str, drained: int, cut: int, continued: int = 0, refused: int = 0) -> None:
        """The switch's drain ended: the old variant goes next."""
        if self.current is None or self.current.stage != "drain":
            return
        self.current.hold_id = hold_id
        self.current.drained, self.current.cut = drained, cut
        self.current.continued, self.current.refused = continued, refused
        self.current.enter("stop", self.clock())

    def stage(self, name: str) -> None:
        if self.current is not None:
            self.current.enter(name, self.clock())

    def routed(self) -> None:
        """The gateway was routed to the new backend: it starts (or is woken next)."""
        if self.current is not None:
            self.current.routed = True
            self.stage("start")

    def backend_call(self, path: str, ok: bool | None) -> None:
        """A `/sleep` or `/wake_up` through the control channel: started (None) or ended."""
        cur = self.current
        if cur is None or path not in ("/sleep", "/wake_up"):
            return
        if path == "/sleep":
            if ok is None:
                self.stage("sleep")
            elif ok:
                if cur.from_variant and cur.from_variant not in self.sleeping:
                    self.sleeping.append(cur.from_variant)
                self.stage("start")
        elif ok is None:
            if cur.stage == "gate" and cur.stages and cur.stages[-1][0] == "start":
                # a sleeping backend answers /health: its readiness before the wake was no gate
                _, seconds = cur.stages.pop()
                cur.stage, cur.stage_began = "start", cur.stage_began - seconds
            self.stage("wake")
        elif ok:
            self.sleeping = [v for v in self.sleeping if v != cur.to_variant]
            self.stage("gate")

    def backend_ready(self, ready: bool) -> None:
        """The backend became ready (a routed one booted): the gate follows."""
        cur = self.current
        if ready and cur is not None and cur.routed and cur.stage == "start":
            self.stage("gate")

    def released(self, hold_ids: Iterable[str], report: dict[str, Any] | None = None) -> None:
        """Holds were released; the switch's own hold ends it with the host's report."""
        cur = self.current
        if cur is None or cur.hold_id is None or cur.hold_id not in set(hold_ids):
            return
        report = report or {}
        serving = report.get("serving")
        if serving:
            self.sleeping = [v for v in self.sleeping if v != serving]
        ok = report.get("ok")
        outcome = "ok" if ok is True else "failed" if ok is False else "released"
        self.finish(outcome, str(report.get("detail") or ""))

    def probation(self, variant: str, state: str, until: float | None = None) -> bool:
        """The host's probation of the newest switch, when it brought `variant` in: `running`
        (until `until`, epoch seconds) or how it ended; False when that switch is not the newest."""
        newest = self.history[0] if self.history else None
        if newest is None or newest.get("to") != variant or newest.get("gateway_only"):
            return False
        newest["probation"] = {"state": state, "until": round(until, 3) if until is not None else None}
        if self.on_finish is not None:
            self.on_finish(list(self.history))
        return True

    def expire(self, active_hold_ids: Iterable[str]) -> None:
        """End the switch whose hold is gone without a release (its lease ran out)."""
        cur = self.current
        if cur is not None and cur.hold_id is not None and cur.hold_id not in set(active_hold_ids):
            self.finish("abandoned", "the hold's lease ran out before the swap released it")

    def finish(self, outcome: str, detail: str = "") -> None:
        """Close the switch under way and keep it in the history."""
        cur = self.current
        if cur is None:
            return
        now = self.clock()
        cur.stages.append((cur.stage, now - cur.stage_began))
        cur.outcome = outcome
        cur.detail = detail[:300]
        cur.duration_s = now - cur.began
        self.history.appendleft(cur.describe(now))
        self.current = None
        if self.on_finish is not None:
            self.on_finish(list(self.history))

    def snapshot(self) -> dict[str, Any]:
        """The switch under way (or None) and the history, newest first."""
        now = self.clock()
        return {
            "current": self.current.describe(now) if self.current else None,
            "recent": list(self.history),
        }
