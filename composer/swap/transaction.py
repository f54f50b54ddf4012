"""One swap as a transaction: run a plan's steps in order; on any failure run its rollback.

`run` drains the gateway, runs the steps the plan names (each a function of
`composer.swap.steps` returning its outcome, folded into the result here), and releases
the held requests to what serves at the end: the target, or the previous variant after a
rollback. `roll_back` removes what the failed swap created and brings the previous
variant back from exactly where the plan says (its sleeping container, or the run file
and compose service that created it). Only the first Ctrl-C, SIGTERM or SIGHUP counts:
later ones are ignored until the rollback has ended.

The settle watch begins when the engine came up (`_engine_started`): at readiness for a
started container, at the wake call for a woken one, at the process's start for one
adopted or routed to again; the warm-up and the wake checks run beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from composer.capacity.model import release_budget
from composer.engine import bootlog, diagnose
from composer.engine.client import compose
from composer.engine.containers import upstream_url
from composer.engine.gate import PROBATION_INTERVAL, GateTarget, run_mark, running_target, watch_probation
from composer.errors import ComposerError, DiagnosedError, GatewayControlError, HealthCheckFailed, SwapFailed
from composer.render.files import run_file
from composer.render.runfiles import compose_environment
from composer.render.spec import CONTAINER_PORT
from composer.render.target import resolve_target
from composer.signals import handled, interrupt_once, interrupts_ignored
from composer.swap import evidence, snapshot, standby, steps
from composer.swap.gpu_release import ReleaseWait
from composer.swap.steps import Context, Outcome

if TYPE_CHECKING:
    from composer.engine.containers import RunningVariant
    from composer.engine.variant_container import VariantContainer
    from composer.render.target import Target
    from composer.swap.holding import EarlyHold
    from composer.swap.journal import SwapRecord
    from composer.swap.plan import SwapPlan
    from composer.swap.swapper import UpResult

WAKE_SETTLE_SHARE = 0.25
"""After a wake the process did not restart (no load, no engine start to fail late): the
settle watch is a quarter of the stack's, counted from the wake call (see `settle_left`),
and the wake checks and the warm-up run beside it (clients wait until both are over)."""


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


def run(
    ctx: Context,
    plan: SwapPlan,
    target: Target,
    compose_file: Path,
    snap: snapshot.Snapshot,
    result: UpResult,
    record: SwapRecord,
    early: EarlyHold | None = None,
) -> None:
    """Run `plan` (drain, its steps, release); on failure roll back and raise SwapFailed.

    `early`: the gateway's control session, opened while `up` planned; the drain uses it
    unless the gateway is recreated first; with it, the gateway is known to run and is not
    started again (`docker compose up` of an unchanged gateway is a no-op costing a process).
    """
    failure: SwapFailed | None = None
    done = False
    held = [ctx]  # the context with the gateway's current hold (a restarted gateway is held again)
    parked: list[str] = []  # the variant this swap put to sleep
    watched: list[tuple[VariantContainer | None, float]] = []  # what serves at the end, since when
    try:
        if target.gateway is not None:  # nothing has changed if this fails
            if plan.gateway_update:
                absorb(result, steps.gateway_update(ctx, compose_file, target.gateway))
            elif plan.gateway.in_place:
                session = early.control() if early is not None else None
                absorb(result, steps.apply_settings(ctx, target.gateway, plan.gateway, session))
            keep = early is not None and snap.gateway_running and not plan.gateway_update
            opened = early.take() if keep else None  # type: ignore[union-attr]
            ensure = not plan.gateway_update and opened is None
            recreate = not snap.gateway_running  # a running gateway's settings may differ from its file
            drained = steps.drain(ctx, target.name, compose_file, target.gateway, ensure, opened, recreate)
            held.append(replace(ctx, hold=absorb(result, drained).hold))
            if plan.gateway_update and "sleep" in plan.steps:  # the new gateway must reach it first
                steps.find_upstream(held[-1], snap)
        with handled(interrupt_once):
            try:
                watched.append(_steps(held, plan, target, compose_file, snap, result, record, parked))
                if plan.gateway_update:
                    steps.tell_serving(held[-1], target.name)
            except BaseException as err:  # any failure, Ctrl-C included, rolls back
                with interrupts_ignored():
                    record.stage("rolling back")
                    failure = roll_back(held, plan, err, compose_file, parked)
                    failure.tail_shown = True  # evidence.keep printed it before the rollback
                    raise failure from err
        done = True
    finally:
        ctx = held[-1]
        with interrupts_ignored():
            if done:
                out = steps.release(ctx, result.variant, ok=True, detail=result.outcome)
            elif failure is not None:
                serving = result.previous if failure.rolled_back else None
                out = steps.release(ctx, serving, ok=False, detail=str(failure).splitlines()[0])
            else:
                out = steps.release(ctx)
            absorb(result, out)
            standby.updates_done()  # restart policies set off the hold: in place before `up` ends
            if not done:
                record.close()
    try:
        on_probation(held, plan, target, compose_file, result, record, parked, *watched[0])
    finally:
        record.close()


def on_probation(
    held: list[Context],
    plan: SwapPlan,
    target: Target,
    compose_file: Path,
    result: UpResult,
    record: SwapRecord,
    parked: list[str],
    container: VariantContainer | None,
    since: float,
) -> None:
    """With clients served, watch the new variant for what is left of `options.probation`
    (counted as the settle watch is); a crash, a restart or a failing `/health` then holds
    the clients again and rolls back as a failed gate does (SwapFailed). The serving
    container's start time and restart count go into `result.serving_container`."""
    ctx = held[-1]
    seconds = settle_left(ctx.options.probation, since)
    if seconds > 0 and container is not None:
        record.stage("on probation")
        ctx.say(
            f"{plan.target} serves; watching it {seconds:.0f}s more (stack.probation): "
            "a crash or a restart rolls it back"
        )
        began = time.monotonic()
        with handled(interrupt_once):
            try:
                where, every = gate_target(ctx, plan.target), PROBATION_INTERVAL
                watch_probation(container, where, seconds, every, steps.watch_gateway(ctx))
            except BaseException as err:  # as during the swap: a failure or Ctrl-C rolls back
                with interrupts_ignored():
                    record.stage("rolling back")
                    _roll_back_served(held, plan, target, compose_file, parked, err)
        result.timings["probation"] = time.monotonic() - began
        result.notes.append(f"{plan.target} ran {seconds:.0f}s on probation without a crash or a restart")
    if container is not None:
        started, restarts, _ = run_mark(container)
        result.serving_container = {
            "id": container.container.id,
            "name": container.name,
            "started_at": started,
            "restart_count": restarts,
        }


def _roll_back_served(
    held: list[Context],
    plan: SwapPlan,
    target: Target,
    compose_file: Path,
    parked: list[str],
    err: BaseException,
) -> None:
    """Roll back a variant that already served: hold the clients again (a stopped gateway is
    started again by the rollback), bring the previous variant back, release; raise SwapFailed."""
    ctx = held[-1]
    if target.gateway is not None and ctx.hold is not None and steps.gateway_stopped(ctx) is None:
        held.append(replace(ctx, hold=steps.drain(ctx, plan.target, None, target.gateway, ensure=False).hold))
    failure: SwapFailed | None = None
    try:
        failure = roll_back(held, plan, err, compose_file, parked)
        failure.tail_shown = True
    finally:
        previous = plan.previous if failure is not None and failure.rolled_back else None
        serving = previous.variant if previous is not None else None
        detail = str(failure).splitlines()[0] if failure is not None else "rollback failed"
        steps.release(held[-1], serving, ok=False, detail=detail)
    raise failure from err


def _steps(
    held: list[Context],
    plan: SwapPlan,
    target: Target,
    compose_file: Path,
    snap: snapshot.Snapshot,
    result: UpResult,
    record: SwapRecord,
    parked: list[str],
) -> tuple[VariantContainer | None, float]:
    """The plan's steps in order: clear, sleep or stop, release wait, start/wake/route, gate, settle;
    the container that serves at the end and when its engine started (monotonic)."""
    ctx = held[-1]
    revive = partial(_revive, target=plan.target, compose_file=compose_file)
    if plan.stop_first:
        absorb(result, steps.stop_named(ctx, snap, plan.stop_first))
    budget = partial(release_budget, ctx.stack, target.variant)
    waiter = ReleaseWait.before_stop(ctx.stack, budget, plan.previous) if "release" in plan.steps else None
    if "sleep" in plan.steps:
        record.stage("putting the serving variant to sleep")
        parked += [absorb(result, steps.sleep(ctx, plan, snap)).parked or ""]
    if "stop" in plan.steps:
        record.stage("stopping")
        absorb(result, steps.stop(ctx, plan, snap))
    if waiter is not None:
        record.stage("waiting for GPU memory")
        absorb(result, steps.release_wait(ctx, waiter))
    began = time.monotonic()
    if "wake" in plan.steps:
        record.stage("waking")
        brought = steps.wake(ctx, plan, snap)
    elif "adopt" in plan.steps:
        record.stage("routing")
        brought = steps.adopt(ctx, plan, snap)
    elif "route" in plan.steps:
        record.stage("routing")
        ctx.say(f"routing the gateway to {plan.target}")
        brought = steps.route(ctx, target)
    else:
        record.stage("loading")
        brought = steps.start(ctx, target, compose_file)
        through_restarts(held, plan.target, _nothing, lambda c: steps.route(c, target), revive)
    record.stage("gating")
    where = gate_target(ctx, plan.target)
    container = brought.container
    if container is None and "route" in plan.steps and snap.serving is not None:
        container = snap.serving.container
    again = partial(steps.route, target=target)
    ready = absorb(
        result,
        through_restarts(held, plan.target, again, lambda c: steps.gate(c, where, began, container), revive),
    )
    ctx = held[-1]
    record.stage("settling")
    woke = "wake" in plan.steps
    since = _engine_started(plan, ready, began)
    absorb(
        result,
        through_restarts(
            held,
            plan.target,
            again,
            lambda c: steps.settle(
                c,
                where,
                ready.container,  # type: ignore[arg-type]
                settle_left(c.options.settle * (WAKE_SETTLE_SHARE if woke else 1.0), since),
                _beside_settle(c, plan, target, where, woke),
            ),
            revive,
        ),
    )
    if woke:
        result.timings["wake"] = ready.ready_at - began  # wake_up until the gate passed
    result.kv_cache_tokens = bootlog.kv_cache_tokens(ready.log)
    expected = target.variant.min_kv_cache_tokens
    if expected and result.kv_cache_tokens is not None and result.kv_cache_tokens < expected:
        result.warnings.append(
            f"KV cache holds {result.kv_cache_tokens:,} tokens, below the expected {expected:,}: "
            "GPU memory may still be held by another process"
        )
    return ready.container, since


def settle_left(seconds: float, since: float, now: float | None = None) -> float:
    """What is left of a settle watch of `seconds` that began at `since` (monotonic)."""
    return max(0.0, seconds - ((time.monotonic() if now is None else now) - since))


def _engine_started(plan: SwapPlan, ready: Outcome, began: float) -> float:
    """When the settle watch begins (monotonic): when a started container became ready (its
    load can fail late); the wake call after a wake (the process did not restart: the watch
    counts from the moment its engine came back); when an adopted or re-routed container's
    process started (it has run since, often long ago)."""
    if "wake" in plan.steps:
        return began
    if "adopt" in plan.steps or "route" in plan.steps:
        running = _running_for(ready.container)
        if running is not None:
            return time.monotonic() - running
    return ready.ready_at


def _running_for(container: VariantContainer | None) -> float | None:
    """Seconds since the container's process started (Docker's State.StartedAt), or None."""
    from datetime import UTC, datetime

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
            held.append(replace(ctx, hold=steps.rehold(ctx, target).hold))
        else:
            raise
        route(held[-1])
        out = step(held[-1])
        if stopped is not None:
            out.warnings.append(f"the gateway stopped during the swap ({stopped}); it was started again")
        return out


def _revive(ctx: Context, stopped: str, target: str, compose_file: Path) -> Context:
    return steps.revive_gateway(ctx, target, compose_file, stopped)


def _nothing(_: Context) -> None:
    return None


def _beside_settle(
    ctx: Context, plan: SwapPlan, target: Target, where: GateTarget, woke: bool
) -> Callable[[], Outcome] | None:
    """What runs during the settle watch: the wake checks after a wake, then the warm-up.

    The acceptance check after a speculative variant's wake sends its own short completions
    past the hold (`standby.ACCEPTANCE_WARMUP_REQUESTS`): they count as warm-up, and only the
    rest of `gateway.warmup_requests` is sent after it.
    """
    requests = ctx.stack.gateway.warmup_requests if ctx.hold is not None else 0
    checked = woke and target.variant.speculative is not None
    if checked:
        requests = max(0, requests - standby.ACCEPTANCE_WARMUP_REQUESTS)
    if not woke and requests <= 0:
        return None

    def beside() -> Outcome:
        out = steps.wake_checks(ctx, plan, target, where) if woke else Outcome("beside")
        if requests > 0:
            warmed = steps.warm(ctx, where, requests)
            out.notes += warmed.notes
            out.extra["warmup"] = warmed.seconds
        return out

    return beside


def roll_back(
    held: list[Context], plan: SwapPlan, err: BaseException, compose_file: Path, parked: list[str]
) -> SwapFailed:
    """Clean up after a failed swap and bring the previous variant back; the cause comes first.

    Nothing here may hide the original failure: each clean-up step that fails (Docker gone,
    a container that will not stop) is reported after it, with what the rollback did.
    """
    ctx = held[-1]
    if isinstance(err, KeyboardInterrupt):
        cause = "interrupted"
    else:
        cause = str(err) if isinstance(err, ComposerError) else f"unexpected {reason(err)}"
    diagnosed = err if isinstance(err, DiagnosedError) else None
    seen: snapshot.Snapshot | None = None
    try:
        seen = snapshot.take(ctx.stack, ctx.client)
    except Exception:  # Docker gone: the failure itself is reported, without a log
        seen = None
    failed = [m for m in seen.members if m.variant == plan.target] if seen else []
    log_tail = (diagnosed and diagnosed.log_tail) or (
        bootlog.tail(failed[0].container.first_run_log(tail=60), 40) if failed else ""  # each boot once
    )
    log_tail = bootlog.redact(log_tail, ctx.stack.api_key)
    hints = (diagnosed and diagnosed.hints) or diagnose.hints(log_tail)
    evidence.keep(ctx.stack, ctx.client, plan.target, cause, log_tail, ctx.say)
    message = f"{plan.target} failed: {cause}"
    removed = seen is not None
    try:
        if seen is None:
            snapshot.take(ctx.stack, ctx.client)  # raises the Docker error to report
        for member in seen.members if seen else ():
            if member.variant == plan.target or (not member.asleep and member.variant not in parked):
                ctx.say(f"stopping {member.variant} ({member.info.name})")
                member.container.stop_and_remove(ctx.stack.stop_grace_period)
    except Exception as stop_err:  # Docker itself may be gone: say so after the cause
        removed = False
        message += f"; could not remove it: {reason(stop_err)}"
    previous = plan.previous
    if previous is None:
        left = _clean_up(ctx, compose_file) if removed else "no variant was running before"
        return SwapFailed(f"{message}; {left}", log_tail, hints, rolled_back=False)
    if not ctx.options.rollback:
        left = "rollback disabled: nothing is running" if removed else "rollback disabled"
        return SwapFailed(f"{message}; {left}", log_tail, hints)
    try:
        stopped = steps.gateway_stopped(ctx) if ctx.hold is not None else None
        if stopped is not None:  # the rollback routes and gates through it: start it first
            held.append(steps.revive_gateway(ctx, previous.variant, compose_file, stopped))
            message += f"; the gateway had stopped ({stopped}) and was started again"
        restore(held, previous, plan, seen if previous.variant in parked else None)
    except BaseException as rollback_err:  # report, never mask the original failure
        return SwapFailed(
            f"{message}; rollback to {previous.variant} failed too: {reason(rollback_err)}",
            log_tail,
            hints,
            rolled_back=False,
        )
    return SwapFailed(
        f"{message}; rolled back to {previous.variant}, which serves again", log_tail, hints, rolled_back=True
    )


def _clean_up(ctx: Context, compose_file: Path) -> str:
    """After a failed first start, remove what it created (the project's network)."""
    try:
        env = compose_environment(compose_file, ctx.stack.api_key)
        compose(ctx.stack.project, compose_file, ["down"], env=env, timeout=120)
    except Exception as err:
        return f"nothing is running; could not remove the project's network: {reason(err)}"
    return "nothing is running"


def restore(
    held: list[Context], previous: RunningVariant, plan: SwapPlan, seen: snapshot.Snapshot | None = None
) -> None:
    """Bring the previous variant back: wake its sleeping container (when this swap put it to
    sleep and `seen` still shows it), or start exactly the run file and service that created it."""
    ctx = held[-1]
    ctx.say(f"rolling back to {previous.variant}")
    sleeper = next((m for m in seen.members if m.info.name == previous.name), None) if seen else None
    back = running_target(ctx.stack, previous)
    if sleeper is not None and sleeper.running:
        began = time.monotonic()
        standby.wake(ctx.control(), sleeper.container, previous.variant, ctx.stack)
        standby.unpark(sleeper.container, ctx.stack.restart)
        again = _route_to(upstream_url(previous.name))
        through_restarts(
            held, previous.variant, again, lambda c: steps.gate(c, back, began, sleeper.container)
        )
        through_restarts(
            held,
            previous.variant,
            again,
            lambda c: steps.settle(c, back, sleeper.container, c.options.settle),
        )
        standby.check_awake(held[-1].control(), previous.variant)
        return
    rollback = plan.rollback
    recorded = (rollback.config_file if rollback else None) or previous.config_file
    compose_file = Path(recorded) if recorded else None
    service = (rollback.service if rollback else None) or previous.service
    if compose_file is None or not compose_file.is_file():
        previous_target = resolve_target(ctx.stack, previous.variant)
        compose_file = run_file(previous_target)
        service = previous_target.spec.compose_service
    began = time.monotonic()
    steps.compose_up(ctx, compose_file, service or ctx.stack.service)
    standby_service = service not in (None, ctx.stack.service)
    again = _route_to(
        upstream_url(previous.name) if standby_service else f"http://{ctx.stack.service}:{CONTAINER_PORT}"
    )
    again(ctx)
    container = steps.by_name(ctx, previous.name) or _newest_serving(ctx)
    ready = through_restarts(held, previous.variant, again, lambda c: steps.gate(c, back, began, container))
    through_restarts(
        held,
        previous.variant,
        again,
        lambda c: steps.settle(c, back, ready.container, c.options.settle),  # type: ignore[arg-type]
    )


def _route_to(url: str) -> Callable[[Context], None]:
    """Route the gateway of a context's hold to `url` (nothing without a hold)."""

    def route(ctx: Context) -> None:
        if ctx.hold is not None:
            ctx.hold.control.route(url)

    return route


def _newest_serving(ctx: Context) -> VariantContainer | None:
    """The newest running container that is not asleep (a rollback's container under another name)."""
    seen = snapshot.take(ctx.stack, ctx.client)
    return next((m.container for m in seen.members if not m.asleep), None)


def gateway_only(
    ctx: Context,
    plan: SwapPlan,
    target: Target,
    compose_file: Path,
    result: UpResult,
    early: EarlyHold | None = None,
) -> None:
    """Only the gateway's settings changed: applied in place (through `early`'s session when it
    opened), or (what only a new container can change) drain it, recreate it, route it to what
    serves, release.

    The serving variant is never touched, so there is nothing to roll back.
    """
    assert target.gateway is not None
    if not plan.gateway_update:
        session = early.control() if early is not None else None
        absorb(result, steps.apply_settings(ctx, target.gateway, plan.gateway, session))
        return
    updated = False
    try:
        absorb(result, steps.gateway_update(ctx, compose_file, target.gateway))
        ctx = replace(
            ctx, hold=absorb(result, steps.drain(ctx, target.name, compose_file, target.gateway, False)).hold
        )
        steps.route(ctx, target)  # the new gateway forwards to the serving container at once
        steps.tell_serving(ctx, target.name)
        updated = True
    finally:
        if updated:
            absorb(result, steps.release(ctx, result.variant, ok=True, detail=result.outcome))
        else:
            absorb(result, steps.release(ctx))
