"""The single switch's Docker executor: the dispatch table `composer.swap.execute` runs a
`SwapPlan`'s typed operations through (`composer.swap.ops`).

`SingleSwap` holds the collaborators (the context: stack, Docker client, options, the
gateway's current hold) and what the operations produce as they run (the release wait's
snapshot, the container that serves, when its engine started); each handler does one
operation and folds its outcome into the swap's result. It never reads the variant's
settings: the operations carry the containers, run files and services, the settle watch,
the warm-up and the checks. On a failure or the first Ctrl-C, SIGTERM or SIGHUP, `execute`
runs the inverses of what ran, newest first: `keep_evidence` keeps the failed variant's log
before, `explain` words the error after (the cause first, then what the undo did). A
gateway that restarted or stopped during a route, a gate or a settle watch is held (or
started) again and the operation runs once more (`through_restarts`).

The settle watch begins when the engine came up (`Settle.since`): at readiness for a started
container, at the wake call for a woken one, at the process's start for one adopted or
routed to again; the warm-up and the wake checks run beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine import bootlog, diagnose
from composer.engine.client import compose
from composer.engine.containers import upstream_url
from composer.engine.gate import PROBATION_INTERVAL, GateTarget, run_mark, watch_probation
from composer.errors import ComposerError, DiagnosedError, GatewayControlError, HealthCheckFailed, SwapFailed
from composer.render.runfiles import compose_environment
from composer.render.spec import CONTAINER_PORT
from composer.signals import interrupts_ignored
from composer.swap import evidence, ops, standby, steps
from composer.swap.execute import Handlers, Undone, execute
from composer.swap.gpu_release import ReleaseWait
from composer.swap.ops import Member, Op
from composer.swap.steps import Context, Outcome

if TYPE_CHECKING:
    from composer.engine.variant_container import VariantContainer
    from composer.probes.gpu import GpuInfo
    from composer.render.gateway import GatewaySpec
    from composer.swap.holding import EarlyHold
    from composer.swap.journal import SwapRecord
    from composer.swap.plan import SwapPlan
    from composer.swap.swapper import UpResult


def reason(err: BaseException) -> str:
    """An error as one line: our own messages as they are, others with their type."""
    return str(err) if isinstance(err, ComposerError) else f"{type(err).__name__}: {err}"


DRAINED = ("finished", "cut", "continued", "refused")
"""`drained`'s counts: requests that finished, were cut, streams continued and refused."""


def absorb(result: UpResult, out: Outcome) -> Outcome:
    """Fold one step's outcome into the swap's result (timings add up per step kind)."""
    if out.seconds or out.step in {"stop", "sleep", "release_wait", "release", "settle"}:
        result.timings[out.step] = result.timings.get(out.step, 0.0) + out.seconds
    for name, seconds in out.extra.items():
        result.timings[name] = result.timings.get(name, 0.0) + seconds
    result.notes += out.notes
    result.warnings += out.warnings
    if out.port_gap is not None:
        result.port_gap = out.port_gap.to_json()
    if out.drained is not None:
        before = result.drained or dict.fromkeys(DRAINED, 0)
        result.drained = {
            name: before[name] + count for name, count in zip(DRAINED, out.drained, strict=True)
        }
    return out


def gate_target(ctx: Context, variant: str) -> GateTarget:
    stack = ctx.stack
    return GateTarget(variant, stack.port, stack.bind_address, stack.served_model_name, stack.api_key)


def settle_left(seconds: float, since: float, now: float | None = None) -> float:
    """What is left of a settle watch of `seconds` that began at `since` (monotonic)."""
    return max(0.0, seconds - ((time.monotonic() if now is None else now) - since))


def engine_started(since: str, ready: Outcome, began: float) -> float:
    """When the settle watch begins (monotonic): `ready`, when a started container became
    ready (its load can fail late); `wake`, the wake call (`began`: the process did not
    restart); `process`, when an adopted or re-routed container's process started."""
    if since == "wake":
        return began
    if since == "process":
        running = _running_for(ready.container)
        if running is not None:
            return time.monotonic() - running
    return ready.ready_at


def _running_for(container: VariantContainer | None) -> float | None:
    """Seconds since the container's process started (Docker's State.StartedAt), or None."""
    try:
        started = str(container.container.attrs["State"]["StartedAt"])  # type: ignore[union-attr]
        head, _, frac = started.rstrip("Z").partition(".")
        when = datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}").replace(tzinfo=UTC)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    return max(0.0, (datetime.now(UTC) - when).total_seconds())


Revive = Callable[[Context, str], Context]


def through_restarts(
    held: list[Context],
    target: str,
    route: Callable[[Context], object],
    step: Callable[[Context], Outcome],
    revive: Revive | None = None,
) -> Outcome:
    """Run a gate, settle or route step; when the gateway restarted meanwhile (it refuses the
    swap's probe token), hold it again, route it again and run the step once more. When the
    gateway stopped (killed, crashed, removed), `revive` starts and holds it again first, and
    the step's outcome says so."""
    try:
        return step(held[-1])
    except (HealthCheckFailed, GatewayControlError) as err:
        ctx = held[-1]
        stopped = steps.gateway_stopped(ctx) if ctx.hold is not None and revive is not None else None
        if stopped is not None and revive is not None:
            held.append(revive(ctx, stopped))
        elif ctx.hold is not None and steps.hold_lost(err):
            held.append(steps.hold_again(ctx, target))
        else:
            raise
        route(held[-1])
        out = step(held[-1])
        if stopped is not None:
            out.warnings.append(f"the gateway stopped during the swap ({stopped}); it was started again")
        return out


def beside_settle(ctx: Context, op: ops.Settle, where: GateTarget) -> Callable[[], Outcome] | None:
    """What runs during the settle watch: the wake checks after a wake, then the warm-up
    (`op.warmup` requests, past the hold; none without one)."""
    requests = op.warmup if ctx.hold is not None else 0
    if not op.woke and requests <= 0:
        return None

    def beside() -> Outcome:
        out = (
            steps.wake_checks(ctx, op.member.variant, op.acceptance, where) if op.woke else Outcome("beside")
        )
        if requests > 0:
            warmed = steps.warm(ctx, where, requests)
            out.notes += warmed.notes
            out.extra["warmup"] = warmed.seconds
        return out

    return beside


class SingleSwap:
    """One switch's operations on one Docker engine: its methods are the dispatch table
    (`handlers`), one per operation type; `held` ends with the context of the gateway's
    current hold (a restarted gateway is held again)."""

    def __init__(
        self,
        ctx: Context,
        plan: SwapPlan,
        result: UpResult,
        gateway: GatewaySpec | None,
        compose_file: Path,
        budget: Callable[[tuple[GpuInfo, ...]], Mapping[int, int] | None] | None = None,
        early: EarlyHold | None = None,
    ) -> None:
        self.held = [ctx]
        self.plan, self.result, self.gateway, self.compose_file = plan, result, gateway, compose_file
        self.budget, self.early = budget, early
        self.waiter: ReleaseWait | None = None
        self.began = time.monotonic()  # when what serves next began to come in (start, wake, route)
        self.ready = Outcome("start_to_ready", ready_at=self.began)
        self.since = self.began  # when the engine of what serves now started (monotonic)
        self.released = False
        self.updated = False
        self.cause, self.tail, self.hints = "", "", ()

    @property
    def ctx(self) -> Context:
        return self.held[-1]

    def handlers(self) -> Handlers:
        return {
            ops.UpdateGateway: self.update_gateway,
            ops.ApplySettings: self.apply_settings,
            ops.Hold: self.hold,
            ops.StopNamed: self.stop_named,
            ops.Sleep: self.sleep,
            ops.Stop: self.stop,
            ops.AwaitRelease: self.await_release,
            ops.Start: self.start,
            ops.Wake: self.wake,
            ops.Adopt: self.adopt,
            ops.Route: self.route,
            ops.Gate: self.gate,
            ops.Settle: self.settle,
            ops.Release: self.release,
            ops.Probation: self.probation,
            ops.Remove: self.remove,
        }

    # -- the gateway ----------------------------------------------------------------------
    def update_gateway(self, op: ops.UpdateGateway) -> None:
        assert self.gateway is not None
        absorb(self.result, steps.gateway_update(self.ctx, Path(op.run_file), self.gateway))
        self.updated = True

    def apply_settings(self, op: ops.ApplySettings) -> None:
        assert self.gateway is not None
        session = self.early.control() if self.early is not None else None
        absorb(self.result, steps.apply_settings(self.ctx, self.gateway, dict(op.settings), op.keys, session))

    def hold(self, op: ops.Hold) -> None:
        """Hold and drain (the gateway started from `op.run_file` first); after a release (an
        undo on probation) hold again, unless the gateway stopped (the undo's gate starts it)."""
        ctx = self.ctx
        if self.gateway is None:
            return
        if self.released:
            if ctx.hold is not None and steps.gateway_stopped(ctx) is None:
                self.held.append(
                    replace(ctx, hold=steps.drain(ctx, op.target, None, self.gateway, False).hold)
                )
            self.released = False
            return
        opened = (
            self.early.take() if self.early is not None and not self.updated and not op.run_file else None
        )
        file = Path(op.run_file) if op.run_file else None
        drained = steps.drain(ctx, op.target, file, self.gateway, file is not None, opened, op.recreate)
        self.held.append(replace(ctx, hold=absorb(self.result, drained).hold))
        if op.serving is not None:  # a new gateway reaches what serves before anything else
            steps.find_upstream(self.ctx, self._url(op.serving), op.serving.variant)

    def release(self, op: ops.Release) -> None:
        ctx = self.ctx
        if op.tell:
            steps.tell_serving(ctx, op.variant)
        with interrupts_ignored():
            absorb(self.result, steps.release(ctx, op.variant, ok=True, detail=self.result.outcome))
            standby.updates_done()  # restart policies set off the hold: in place before `up` ends
            self.released = True

    def _url(self, member: Member) -> str:
        """Where the gateway reaches the member: its own name, or the shared service's."""
        service = self.ctx.stack.service
        return (
            f"http://{service}:{CONTAINER_PORT}"
            if member.service == service
            else upstream_url(member.container)
        )

    def _route_to(self, member: Member) -> Callable[[Context], Outcome]:
        def route(ctx: Context) -> Outcome:
            if ctx.hold is not None:
                ctx.hold.control.route(self._url(member))
            return Outcome("route")

        return route

    def _revive(self, ctx: Context, stopped: str) -> Context:
        return steps.hold_again(ctx, self.plan.target, self.compose_file, stopped)

    def _through(self, member: Member, step: Callable[[Context], Outcome]) -> Outcome:
        return through_restarts(self.held, member.variant, self._route_to(member), step, self._revive)

    # -- containers -----------------------------------------------------------------------
    def _stop(self, variant: str, name: str) -> None:
        found = steps.by_name(self.ctx, name)
        if found is not None:
            self.ctx.say(f"stopping {variant} ({name})")
            found.stop_and_remove(self.ctx.stack.stop_grace_period)

    def _named(self, member: Member, what: str) -> VariantContainer:
        found = steps.by_name(self.ctx, member.container)
        if found is None:
            raise HealthCheckFailed(f"{member.variant}'s {what} {member.container} is gone")
        return found

    def stop_named(self, op: ops.StopNamed) -> None:
        began = time.monotonic()
        for name in op.containers:
            self._stop("it", name)
        absorb(self.result, Outcome("stop_first", time.monotonic() - began))

    def sleep(self, op: ops.Sleep) -> None:
        ctx = self.ctx
        began = time.monotonic()
        ctx.say(f"putting {op.member.variant} to sleep (level {ctx.stack.sleep_level})")
        serving = self._named(op.member, "container")
        standby.put_to_sleep(ctx.control(), serving, op.member.variant, ctx.stack)
        standby.park(serving)
        absorb(self.result, Outcome("sleep", time.monotonic() - began))

    def stop(self, op: ops.Stop) -> None:
        """Stop the serving container (its GPUs read first, for the release wait) and the
        exited ones of the shared service."""
        began = time.monotonic()
        self.waiter = ReleaseWait.before_stop(self.ctx.stack, self.budget, self.plan.previous)
        for name in (op.member.container, *op.also):
            self._stop(op.member.variant, name)
        absorb(self.result, Outcome("stop", time.monotonic() - began))

    def await_release(self, op: ops.AwaitRelease) -> None:
        if self.waiter is not None:  # taken before the stop
            took = self.waiter.wait(self.ctx.options.release_timeout, self.ctx.waiting)
            absorb(self.result, Outcome("release_wait", took.seconds, notes=[took.note] if took.note else []))

    def start(self, op: ops.Start) -> None:
        """Compose up the member's service from its run file, then route the gateway to it."""
        self.began = time.monotonic()
        self.ctx.say(f"starting {op.member.variant}")
        steps.compose_up(self.ctx, Path(op.member.run_file), op.member.service)
        self._through(op.member, self._route_to(op.member))

    def wake(self, op: ops.Wake) -> None:
        self.began = time.monotonic()
        ctx = self.ctx
        ctx.say(f"waking {op.member.variant}")
        sleeper = self._named(op.member, "sleeping container")
        standby.wake(ctx.control(), sleeper, op.member.variant, ctx.stack)
        standby.unpark(sleeper, ctx.stack.restart)

    def adopt(self, op: ops.Adopt) -> None:
        self.began = time.monotonic()
        ctx = self.ctx
        awake = self._named(op.member, "container")
        ctx.say(f"{op.member.variant} runs awake ({op.member.container}): routing to it")
        ctx.control().route(standby.upstream_of(awake))
        standby.unpark(awake, ctx.stack.restart)

    def route(self, op: ops.Route) -> None:
        self.began = time.monotonic()
        self.ctx.say(f"routing the gateway to {op.member.variant}")
        self._through(op.member, self._route_to(op.member))

    def remove(self, op: ops.Remove) -> None:
        self._stop(op.member.variant, op.member.container)
        if op.network_of:  # nothing ran before: the project's network goes too
            file = Path(op.network_of)
            env = compose_environment(file, self.ctx.stack.api_key)
            compose(self.ctx.stack.project, file, ["down"], env=env, timeout=120)

    # -- the gate and the watches -----------------------------------------------------------
    def gate(self, op: ops.Gate) -> None:
        where = gate_target(self.ctx, op.member.variant)
        container = steps.by_name(self.ctx, op.member.container)
        began, self.ready = self.began, Outcome("start_to_ready")  # not ready until it passed
        self.ready = absorb(
            self.result, self._through(op.member, lambda c: steps.gate(c, where, began, container))
        )

    def settle(self, op: ops.Settle) -> None:
        where = gate_target(self.ctx, op.member.variant)
        ready = self.ready
        self.since = engine_started(op.since, ready, self.began)
        left = settle_left(op.seconds, self.since)
        container = ready.container
        if container is None:  # an undo goes on after a failed gate: this one has nothing to watch
            raise HealthCheckFailed(f"{op.member.variant} did not pass its gate")
        absorb(
            self.result,
            self._through(
                op.member, lambda c: steps.settle(c, where, container, left, beside_settle(c, op, where))
            ),
        )
        if op.woke and op.member.variant == self.plan.target:
            self.result.timings["wake"] = ready.ready_at - self.began  # wake_up until the gate passed

    def probation(self, op: ops.Probation) -> None:
        """With clients served, watch what is left of the probation (counted as the settle
        watch is); a crash, a restart or a failing `/health` fails the swap (and undoes it)."""
        ctx = self.ctx
        seconds = settle_left(op.seconds, self.since)
        container = self.ready.container
        if seconds <= 0 or container is None:
            return
        ctx.say(
            f"{op.member.variant} serves; watching it {seconds:.0f}s more (stack.probation): "
            "a crash or a restart rolls it back"
        )
        began = time.monotonic()
        where = gate_target(ctx, op.member.variant)
        watch_probation(container, where, seconds, PROBATION_INTERVAL, steps.watch_gateway(ctx))
        self.result.timings["probation"] = time.monotonic() - began
        self.result.notes.append(
            f"{op.member.variant} ran {seconds:.0f}s on probation without a crash or a restart"
        )

    # -- a failure ------------------------------------------------------------------------
    def keep_evidence(self, op: Op, err: BaseException) -> None:
        """Before the undo removes the failed variant: keep its log and show its tail."""
        ctx = self.ctx
        if isinstance(err, KeyboardInterrupt):
            self.cause = "interrupted"
        else:
            self.cause = str(err) if isinstance(err, ComposerError) else f"unexpected {reason(err)}"
        if not self.plan.steps:  # only the gateway changed: no variant to keep a log of
            return
        diagnosed = err if isinstance(err, DiagnosedError) else None
        tail = diagnosed.log_tail if diagnosed is not None else ""
        if not tail:
            try:
                found = steps.by_name(ctx, self._brought().container)
                tail = bootlog.tail(found.first_run_log(tail=60), 40) if found is not None else ""
            except Exception:  # Docker gone: the failure itself is reported, without a log
                tail = ""
        self.tail = bootlog.redact(tail, ctx.stack.api_key)
        self.hints = (diagnosed.hints if diagnosed is not None else ()) or tuple(diagnose.hints(self.tail))
        evidence.keep(ctx.stack, ctx.client, self.plan.target, self.cause, self.tail, ctx.say)
        previous = self.plan.previous
        if ctx.options.rollback and previous is not None:
            ctx.say(f"rolling back to {previous.variant}")

    def _brought(self) -> Member:
        return next(op.member for op in self.plan.ops if isinstance(op, ops.BringIn | ops.Route))

    def explain(self, err: BaseException, ran: list[Op], undone: Undone | None) -> SwapFailed:
        """The error: the cause first, then what the undo did (or that there was none)."""
        if not self.plan.steps:
            return SwapFailed(self.cause or reason(err))
        message = f"{self.plan.target} failed: {self.cause}"
        removal = [why for op, why in undone or () if isinstance(op, ops.Remove)]
        others = [why for op, why in undone or () if not isinstance(op, ops.Remove)]
        if removal:
            message += f"; could not remove it: {removal[0]}"
        previous = self.plan.previous
        if undone is None:
            failure = SwapFailed(f"{message}; rollback disabled (--no-rollback): what ran is left as it is")
        elif previous is None:
            failure = SwapFailed(f"{message}; nothing is running", rolled_back=False)
        elif others:
            failure = SwapFailed(
                f"{message}; rollback to {previous.variant} failed too: {others[0]}", rolled_back=False
            )
        else:
            failure = SwapFailed(
                f"{message}; rolled back to {previous.variant}, which serves again", rolled_back=True
            )
        failure.log_tail, failure.hints = self.tail, self.hints
        failure.tail_shown = True  # evidence.keep printed it before the undo
        return failure

    def finish(self, failure: SwapFailed | None) -> None:
        """The held requests flow to what serves after a failure (the gateway is told why)."""
        ctx = self.ctx
        if ctx.hold is not None and not self.released:
            previous = self.plan.previous
            serving = previous.variant if failure is not None and failure.rolled_back and previous else None
            detail = str(failure).splitlines()[0] if failure is not None else ""
            absorb(self.result, steps.release(ctx, serving, ok=False, detail=detail))
        standby.updates_done()

    def report(self) -> None:
        """What serves at the end: its container's start time and restart count, its KV cache."""
        container = self.ready.container
        self.result.kv_cache_tokens = bootlog.kv_cache_tokens(self.ready.log)
        if container is not None:
            started, restarts, _ = run_mark(container)
            self.result.serving_container = {
                "id": container.container.id,
                "name": container.name,
                "started_at": started,
                "restart_count": restarts,
            }


def run(swap: SingleSwap, record: SwapRecord) -> None:
    """Run the plan's operations through the executor; on a failure or a stop signal the
    inverses of what ran, then SwapFailed. The held requests are released in any case."""
    ctx = swap.ctx
    failure: SwapFailed | None = None
    try:
        execute(
            swap.plan.ops,
            swap.handlers(),
            rollback=ctx.options.rollback,
            say=ctx.say,
            failed=swap.keep_evidence,
            stage=record.stage,
            explain=swap.explain,
        )
    except SwapFailed as err:
        failure = err
        raise
    finally:
        with interrupts_ignored():
            try:
                swap.finish(failure)
            finally:
                record.close()
    swap.report()
