"""The one runner of every change of what serves: `up` on Docker (a switch, a live change, one
variant replacing a set, `--recreate-gateway`) and on Kubernetes, `down` and `down VARIANT`.

`run` opens the change's running record (what `status` shows; a killed change leaves it for the
next `status` or `up`), runs the plan's operations through the engine's dispatch table
(`execute`: a failure or a stop signal undoes what ran, newest first), lets the engine finish
(release what it holds, its figures into the result) whatever happened, and writes the change's
one history line (`Plan.event`), a failure's too. An engine is its dispatch table and three
moments of the run, each handed the plan: `failed` (before the undo), `explain` (the error's
words) and `finish` (after the run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

from composer.errors import SwapFailed
from composer.signals import interrupts_ignored
from composer.swap import probation
from composer.swap.execute import Handlers, Say, Undone, execute, quiet
from composer.swap.journal import append_history
from composer.swap.ops import Op
from composer.swap.outcome import UpResult
from composer.swap.plan import Plan

if TYPE_CHECKING:
    from composer.swap.journal import SwapRecord
    from composer.swap.transaction import Context


class Engine(Protocol):
    """What runs a plan's operations (Docker's `DockerSwap`, `down`'s `Downer`, `KubeRollout`)."""

    timings: dict[str, float]
    record: SwapRecord | None  # the change's running record while it runs (a watcher goes on with it)

    def handlers(self) -> Handlers: ...

    def failed(self, plan: Plan, op: Op, err: BaseException) -> None:
        """`op` failed (or a stop signal came during it): before the undo."""

    def explain(self, plan: Plan, err: BaseException, ran: list[Op], undone: Undone | None) -> SwapFailed:
        """The error, in words: the cause, then what the undo did (None: no rollback)."""
        ...

    def finish(self, plan: Plan, failure: SwapFailed | None, result: UpResult) -> None:
        """After the run, a failure's too: release what is held, put the figures into `result`."""


@dataclass(frozen=True)
class Change:
    """How a change runs: its project, its history `kind` (`up`, `live`, `down`), whether a
    failure is undone, how long its record may stay open, who asked for it, and the history's
    word for it once it ran (`ran`; else the result's outcome)."""

    project: str
    kind: str = "up"
    rollback: bool = True
    timeout: float = 600.0
    say: Say = quiet
    by: str | None = None
    ran: str = ""

    @classmethod
    def of(cls, ctx: Context, kind: str = "up", rollback: bool | None = None) -> Change:
        """A change of `ctx`'s project, run with its options (`rollback`: unless given)."""
        options = ctx.options
        undo = options.rollback if rollback is None else rollback
        return cls(ctx.stack.project, kind, undo, options.timeout, ctx.say, options.by)


def run(plan: Plan, engine: Engine, result: UpResult, change: Change, began: float | None = None) -> list[Op]:
    """Run `plan` (see above) and return the operations that ran; `result.outcome` is what the
    history says once it ran, `began` when the change began (its `total` timing)."""
    began = time.monotonic() if began is None else began
    record = engine.record = plan.recording(change.project, change.timeout, change.kind)
    ran: list[Op] = []
    failure: SwapFailed | None = None

    def explain(err: BaseException, done: list[Op], undone: Undone | None) -> SwapFailed:
        ran[:] = done
        return engine.explain(plan, err, done, undone)

    try:
        ran = execute(
            plan.ops,
            engine.handlers(),
            rollback=change.rollback,
            say=change.say,
            failed=partial(engine.failed, plan),
            stage=record.stage,
            explain=explain,
        )
    except SwapFailed as err:
        failure = err
        raise
    finally:
        with interrupts_ignored():
            try:
                engine.finish(plan, failure, result)
            finally:
                record.close()
                result.timings.update(engine.timings)
                result.timings["total"] = time.monotonic() - began
                _history(plan, result, change, failure, ran)
    return ran


def _history(plan: Plan, result: UpResult, change: Change, failure: SwapFailed | None, ran: list[Op]) -> None:
    """The change's one history line; none for a plan from nothing to nothing (`down` of an
    empty project); a probation's watcher writes how the probation ended instead."""
    if not (plan.before or plan.after):
        return
    if failure is None and change.kind == "up" and probation.is_watcher():  # `up` wrote the switch
        ended = (result.probation or {}).get("outcome", "passed")
        seconds = round(result.timings.get("probation", 0.0), 3)
        entry = {"kind": "probation", "source": plan.serving, "target": plan.target, "outcome": ended}
        append_history(change.project, entry | {"timings": {"total": seconds}})
        return
    outcome = change.ran or result.outcome
    if failure is not None:
        outcome = "rolled back" if failure.rolled_back else "failed"
    event = plan.event(outcome, result, kind=change.kind, cause=failure, ran=ran, by=change.by)
    append_history(change.project, event)
