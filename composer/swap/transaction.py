"""Docker's engine: the dispatch table (`DockerSwap.handlers`) the one runner
(`composer.swap.runner`) runs a plan with, one handler per operation type, a single switch's
and a live change's alike.

`Context` holds the collaborators (stack, Docker client, options, where to say things, the
gateway's current hold). Each handler does one operation and writes what it did (seconds per
step kind, notes, warnings, drained counts) into its result, never reading the variant's
settings: the operations carry them. `failed` keeps a failed variant's log before the undo,
`explain` words the error after it, `finish` releases the hold and reports what serves. A
gateway that restarted or stopped during a route, a gate or a settle watch is held (or started)
again and the operation runs once more (`through_restarts`). The settle watch begins when the
engine came up (`Settle.since`), with the warm-up and the wake checks beside it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from composer.engine import bootlog, diagnose, retry
from composer.engine.client import compose
from composer.engine.containers import gateway_container, holder_kept, upstream_url
from composer.engine.gate import (
    PROBATION_INTERVAL,
    GateTarget,
    run_mark,
    wait_ready,
    watch_probation,
    watch_settled,
)
from composer.errors import ComposerError, DiagnosedError, GatewayControlError, HealthCheckFailed, SwapFailed
from composer.gateway.wire import SINGLE
from composer.render.gateway import SERVICE as GATEWAY_SERVICE
from composer.render.runfiles import compose_environment
from composer.render.spec import CONTAINER_PORT
from composer.signals import interrupts_ignored
from composer.swap import evidence, ops, standby
from composer.swap.execute import Cases, Handlers, Say, Undone, explain_failure, quiet
from composer.swap.gateway_replace import (
    Replacement,
    port_fault,
    repair_port,
    replace_gateway,
    running_gateway,
)
from composer.swap.gpu_release import ReleaseWait
from composer.swap.holding import Drained, SwapHold, start_hold, warm_up
from composer.swap.ops import Member, Op
from composer.swap.plan import Plan

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from composer.engine.variant_container import VariantContainer
    from composer.gateway.host.client import GatewayControl
    from composer.probes.gpu import GpuInfo, GpuProbe
    from composer.render.gateway import GatewaySpec
    from composer.stack.model import Stack
    from composer.swap.holding import EarlyHold
    from composer.swap.journal import SwapRecord
    from composer.swap.outcome import UpOptions, UpResult

T = TypeVar("T")
UPSTREAM_WAIT_S = 30.0
"""How long a recreated gateway has to reach the serving variant before it is put to sleep."""
DRAINED = ("finished", "cut", "continued", "refused")
"""`drained`'s counts: requests that finished, were cut, streams continued and refused."""


@dataclass(frozen=True)
class Context:
    """The collaborators every operation uses; `hold` is set once the gateway is drained."""

    stack: Stack
    client: docker.DockerClient
    options: UpOptions
    say: Say = quiet
    waiting: Say = quiet
    hold: SwapHold | None = None

    def control(self) -> GatewayControl:
        """The gateway's control channel of this swap's hold."""
        if self.hold is None:
            raise SwapFailed("sleep standby needs the gateway's control channel, which is not held")
        return self.hold.control

    def past_the_hold(self, target: GateTarget) -> GateTarget:
        """The gate's target, carrying the hold's probe token when the gateway holds clients."""
        return replace(target, headers=self.hold.headers) if self.hold is not None else target


def compose_up(
    ctx: Context,
    compose_file: Path,
    service: str | None = None,
    host: dict[str, str] | None = None,
    recreate: bool = True,
) -> None:
    """`docker compose up -d` of one service of a run file (never builds or pulls; the gateway's port
    holder kept); `host`: values the file interpolates; `recreate=False`: keep an existing one."""
    env = {**compose_environment(compose_file, ctx.stack.api_key), **(host or {})}
    keep = [] if recreate else ["--no-recreate"]
    if service == GATEWAY_SERVICE:
        keep += holder_kept(ctx.stack, ctx.client)
    compose(
        ctx.stack.project,
        compose_file,
        ["up", "--detach", "--no-build", "--pull", "never", *keep, service or ctx.stack.service],
        env=env,
        timeout=max(120.0, ctx.options.timeout),
    )


def start_service(ctx: Context, what: str, run_file: str, service: str) -> None:
    """Say that `what` starts, then compose up `service` from `run_file` (a live member, the
    switch's target, the gateway)."""
    ctx.say(f"starting {what}")
    compose_up(ctx, Path(run_file), service)


def stop_container(
    ctx: Context, what: str, name: str, before: Callable[[VariantContainer], object] | None = None
) -> None:
    """Stop and remove the container `name` (gone is fine), saying so; `before` sees it first."""
    found = by_name(ctx, name)
    if found is not None:
        if before is not None:
            before(found)
        ctx.say(f"stopping {what} ({name})")
        found.stop_and_remove(ctx.stack.stop_grace_period)


def drain(
    ctx: Context,
    target: str,
    compose_file: Path | None,
    gateway: GatewaySpec,
    opened: SwapHold | None = None,
    recreate: bool = True,
) -> tuple[SwapHold, Drained]:
    """Start the gateway from `compose_file` when given, then hold new requests and let those in
    flight finish; `opened`: a hold whose control session is already open (`EarlyHold`)."""
    if compose_file is not None:
        compose_up(ctx, compose_file, gateway.service, recreate=recreate)
    hold = opened or start_hold(
        ctx.stack,
        ctx.client,
        ctx.stack.gateway.drain_timeout,
        ctx.say,
        target=target,
        container=_get(ctx, gateway.container_name),
        waiting=ctx.waiting,
    )
    return hold, hold.begin(ctx.stack.gateway.continues(ctx.options.drain))


def _get(ctx: Context, name: str) -> Container | None:
    """A container by its name (one inspection, no listing); None when there is none."""
    from docker.errors import NotFound

    try:
        return ctx.client.containers.get(name)
    except NotFound:
        return None


def by_name(ctx: Context, name: str) -> VariantContainer | None:
    """A variant's container by its name; None when there is none."""
    from composer.engine.variant_container import VariantContainer

    found = _get(ctx, name)
    return VariantContainer(found) if found is not None else None


def gateway_stopped(ctx: Context) -> str | None:
    """How the stack's gateway container stopped ("exited with code 137", "removed", its port
    holder's fault); None while it serves, without a gateway, or when Docker does not answer."""
    from docker.errors import NotFound

    from composer.render.gateway import build_gateway_spec

    gateway = build_gateway_spec(ctx.stack)
    if gateway is None:
        return None
    try:
        container = ctx.client.containers.get(gateway.container_name)
    except NotFound:
        return "removed"
    except Exception:  # Docker itself is gone: nothing to start the gateway with
        return None
    state = container.attrs.get("State") or {}
    if state.get("Running") and not state.get("Restarting"):
        return port_fault(ctx.stack, ctx.client, container)  # it runs, maybe in a network that is gone
    return f"exited with code {state.get('ExitCode')}"


def watch_gateway(ctx: Context) -> Callable[[], None] | None:
    """For a held swap's gate and settle watch: raises GatewayControlError once the gateway
    that carries the probes stops running (None without a hold)."""
    if ctx.hold is None:
        return None

    def check() -> None:
        stopped = gateway_stopped(ctx)
        if stopped is not None:
            raise GatewayControlError("probe", f"the gateway container {stopped}")

    return check


def hold_again(ctx: Context, target: str, compose_file: Path | None = None, why: str = "") -> Context:
    """Hold the gateway again (a new hold, a new probe token) after it restarted, or after it
    stopped (`why`; started again from `compose_file`) and took its hold with it."""
    from composer.render.gateway import build_gateway_spec

    gateway = build_gateway_spec(ctx.stack)
    if gateway is None:
        raise SwapFailed("the gateway's hold is gone and there is no gateway to hold again")
    if ctx.hold is not None:
        ctx.hold.end()  # stops its renewals; the old gateway's holds are gone with it
    repaired = repair_port(ctx.stack, ctx.client, ctx.say)  # its port holder stopped or restarted
    started = f"the gateway stopped during the swap ({why}): starting it again"
    ctx.say(
        f"{repaired}; holding its requests again"
        if repaired
        else started
        if compose_file
        else "the gateway restarted during the swap: holding its requests again"
    )
    return replace(ctx, hold=drain(ctx, target, None if repaired else compose_file, gateway)[0])


def gate_target(ctx: Context, variant: str) -> GateTarget:
    stack = ctx.stack
    return GateTarget(variant, stack.port, stack.bind_address, stack.served_model_name, stack.api_key)


def settle_left(seconds: float, since: float, now: float | None = None) -> float:
    """What is left of a settle watch of `seconds` that began at `since` (monotonic)."""
    return max(0.0, seconds - ((time.monotonic() if now is None else now) - since))


def engine_started(since: str, container: VariantContainer | None, ready_at: float, began: float) -> float:
    """When the settle watch begins (monotonic): `ready`: at `ready_at` (a load can fail late);
    `wake`: at the wake call, `began`; `process`: when the container's process started."""
    if since == "wake":
        return began
    if since == "process" and container is not None:  # Docker's State.StartedAt
        with contextlib.suppress(KeyError, TypeError, ValueError):
            started = datetime.fromisoformat(str(container.container.attrs["State"]["StartedAt"]))
            return time.monotonic() - max(0.0, (datetime.now(UTC) - started).total_seconds())
    return ready_at


def through_restarts(
    held: list[Context],
    target: str,
    route: Callable[[Context], object],
    step: Callable[[Context], T],
    revive: Callable[[Context, str], Context],
    warnings: list[str],
) -> T:
    """Run a gate, settle or route step; when the gateway restarted (refusing the probe token) or
    stopped (`revive`: started again, said in `warnings`), hold and route it again, then rerun."""
    try:
        return step(held[-1])
    except (HealthCheckFailed, GatewayControlError) as err:
        ctx = held[-1]
        stopped = gateway_stopped(ctx) if ctx.hold is not None else None
        if stopped is not None:
            held.append(revive(ctx, stopped))
        elif ctx.hold is not None and "refused the swap's probe token" in str(err):  # it restarted
            held.append(hold_again(ctx, target))
        else:
            raise
        route(held[-1])
        out = step(held[-1])
        if stopped is not None:
            warnings.append(f"the gateway stopped during the swap ({stopped}); it was started again")
        return out


def beside_settle(
    ctx: Context, op: ops.Settle, where: GateTarget, notes: list[str], timings: dict[str, float]
) -> Callable[[], None] | None:
    """What runs during the settle watch: after a wake `/is_sleeping` false (and acceptance), then
    `op.warmup` requests past the hold; notes and seconds go to `notes` and `timings`."""
    requests = op.warmup if ctx.hold is not None else 0
    if not op.woke and requests <= 0:
        return None
    variant = op.member.variant

    def beside() -> None:
        if op.woke:
            standby.check_awake(ctx.control(), variant)
        if op.woke and op.acceptance:
            began = time.monotonic()
            control, floor = ctx.control(), ctx.stack.acceptance_floor
            counters = partial(standby.metrics_counters, control)
            rate = standby.check_acceptance(counters, ctx.past_the_hold(where), floor, " after the wake")
            notes.append(f"acceptance after the wake: {rate:.2f}")
            timings["acceptance_check"] = time.monotonic() - began
        if requests > 0:
            took = warm_up(ctx.past_the_hold(where), requests)
            if took:
                each = ", ".join(f"{t:.2f}s" for t in took)
                notes.append(f"warm-up before clients (during the settle watch): {each} per request")
            timings["warmup"] = sum(took)

    return beside


class DockerSwap:
    """Docker's engine (`composer.swap.runner`): one handler per operation type, a switch's and a
    live change's alike, each writing what it did into `result`; `held` ends with the context of
    the gateway's current hold (a restarted gateway is held again)."""

    def __init__(
        self,
        ctx: Context,
        result: UpResult,
        gateway: GatewaySpec | None = None,
        compose_file: Path | None = None,
        budget: Callable[[tuple[GpuInfo, ...]], Mapping[int, int] | None] | None = None,
        early: EarlyHold | None = None,
    ) -> None:
        self.held = [ctx]
        self.stack, self.client, self.options, self.say = ctx.stack, ctx.client, ctx.options, ctx.say
        self.result, self.gateway, self.compose_file = result, gateway, compose_file
        self.timings, self.notes, self.warnings = result.timings, result.notes, result.warnings
        self.budget, self.early = budget, early
        self._releases: list[ReleaseWait] = []  # taken before each stop, for AwaitRelease
        self.probe: GpuProbe | None = None  # a live member's GPUs (None: the host's, NVML or nvidia-smi)
        self.drained = DrainTally()  # what every hold and drain counted
        self.kept = False  # a failed member's evidence was kept (and its log tail shown)
        self.began = time.monotonic()  # when what serves next began to come in (start, wake, route)
        self.brought: Member | None = None  # the first Start (any how) or Route: what comes in
        # what passed the gate last: its container and boot log, and when it became ready
        self.container: VariantContainer | None = None
        self.log, self.ready_at = "", self.began
        self.since = self.began  # when the engine of what serves now started (monotonic)
        self.released = False
        self.updated = False
        self.replaced: Replacement | None = None  # the gateway's last replacement
        self.cause, self.tail, self.hints = "", "", ()
        self.record: SwapRecord | None = None  # the running record (a watcher goes on with it)

    @property
    def ctx(self) -> Context:
        return self.held[-1]

    def handlers(self) -> Handlers:
        return {
            ops.UpdateGateway: Cases(
                {"start": self.start_gateway, "replace": self.update_gateway, "in place": self.apply_settings}
            ),
            ops.Hold: self.hold,
            ops.Stop: Cases({"stop": self.stop, "sleep": self.sleep, "remove": self.remove_container}),
            ops.AwaitRelease: self.await_release,
            ops.Start: Cases({"start": self.start, "wake": self.wake, "adopt": self.adopt}),
            ops.Route: self.route,
            ops.Gate: self.gate,
            ops.Settle: self.settle,
            ops.Publish: self.publish,
            ops.Drain: self.drain,
            ops.Release: self.release,
            ops.Probation: self.probation,
        }

    def _took(self, step: str, seconds: float) -> None:
        """Seconds of one step kind (they add up per kind)."""
        self.timings[step] = self.timings.get(step, 0.0) + seconds

    # -- the gateway ----------------------------------------------------------------------
    def start_gateway(self, op: ops.UpdateGateway) -> None:
        start_service(self.ctx, "the gateway", op.run_file, GATEWAY_SERVICE)

    def update_gateway(self, op: ops.UpdateGateway) -> None:
        """A new gateway container with the new settings beside the old one, which then finishes
        its requests (`gateway_replace`); a switch counts the port's gap and the old one's requests."""
        self.say(f"replacing the gateway: {op.why}")
        began = time.monotonic()
        file, pointed = Path(op.run_file), _pointing(op.route)
        done = replace_gateway(
            self.stack, self.client, file, self.gateway, self.say, pointed, new_holder=op.holder
        )
        self.replaced = done
        took = time.monotonic() - began
        how = "beside the old one, which then" if done.handed_over else "after the old one stopped, which"
        cut = f", {done.cut} cut" if done.cut else ""
        note = (
            f"the gateway was replaced by a new container with its new settings, started {how} "
            f"finished {done.finished} request(s){cut}; {done.port_gap.line()}"
        )
        self._took("drain", took)
        self._took("gateway_recreate", took)
        self.notes.append(note)
        if done.cut:
            self.warnings.append(
                f"{done.cut} request(s) were still running on the old gateway at its drain timeout "
                "and were cut: clients retry them"
            )
        self.result.port_gap = done.port_gap.to_json()
        self.drained.held(done.finished, done.cut, 0, 0)
        self.updated = True

    def apply_settings(self, op: ops.UpdateGateway) -> None:
        """Apply the gateway's changed settings in place (same container, nothing drained); a
        refusal fails the swap before anything else changed."""
        from composer.gateway.host.client import GatewayControl

        assert self.gateway is not None
        ctx = self.ctx
        control = self.early.control() if self.early is not None else None
        began = time.monotonic()
        if control is None:
            container = _get(ctx, self.gateway.container_name)
            if container is None:
                raise SwapFailed("the gateway's container is gone: its settings cannot be applied")
            control = GatewayControl(container)
        ctx.say(f"applying the gateway's changed settings in place ({op.keys})")
        try:
            control.apply_settings(dict(op.settings))
        except GatewayControlError as err:
            raise SwapFailed(f"the gateway refused its new settings: {err}") from err
        self._took("gateway_settings", time.monotonic() - began)
        self.notes.append(
            f"the gateway's settings were applied in place ({op.keys}): "
            "same container, no request held or refused"
        )

    def hold(self, op: ops.Hold) -> None:
        """Hold and drain (the gateway started from `op.run_file` first); after a release (an
        undo on probation) hold again, unless the gateway stopped (the undo's gate starts it)."""
        ctx = self.ctx
        if self.gateway is None:
            return
        if self.released:
            if ctx.hold is not None and gateway_stopped(ctx) is None:
                self.held.append(replace(ctx, hold=drain(ctx, op.target, None, self.gateway)[0]))
            self.released = False
            return
        opened = (
            self.early.take() if self.early is not None and not self.updated and not op.run_file else None
        )
        file = Path(op.run_file) if op.run_file else None
        hold, drained = drain(ctx, op.target, file, self.gateway, opened, op.recreate)
        if drained.seconds:
            self._took("drain", drained.seconds)
        if drained.cut:
            self.warnings.append(
                f"{drained.cut} request(s) still running after the drain timeout "
                f"({ctx.stack.gateway.drain_timeout}s) were cut"
            )
        self.drained.held(drained.drained, drained.cut, drained.continued, drained.refused)
        self.held.append(replace(ctx, hold=hold))
        if op.serving is not None:  # a new gateway reaches what serves before anything else
            hold.control.route(self._url(op.serving), op.serving.variant)
            if not hold.control.wait_ready(UPSTREAM_WAIT_S):
                ctx.say(f"the new gateway does not reach {op.serving.variant} after {UPSTREAM_WAIT_S:.0f}s")

    def release(self, op: ops.Release) -> None:
        ctx = self.ctx
        if op.tell and ctx.hold is not None and ctx.stack.gateway.switches:
            try:  # a recreated gateway with switching settings learns which variant serves
                ctx.hold.control.report_serving(op.variant)
            except ComposerError as err:
                ctx.say(f"the gateway was not told that {op.variant} serves: {err}")
        with interrupts_ignored():
            self._release(op.variant, ok=True, detail=self.result.outcome)
            standby.updates_done()  # restart policies set off the hold: in place before `up` ends
            self.released = True

    def _release(self, serving: str | None, ok: bool, detail: str) -> None:
        """The held requests flow to what serves now (the gateway is told what that is)."""
        began = time.monotonic()
        hold = self.ctx.hold
        note = hold.end(serving, ok=ok, detail=detail) if hold is not None else None
        self._took("release", time.monotonic() - began)
        if note:
            self.notes.append(note)

    def _url(self, member: Member) -> str:
        """Where the gateway reaches the member: its own name, or the shared service's."""
        service = self.ctx.stack.service
        return (
            f"http://{service}:{CONTAINER_PORT}"
            if member.service == service
            else upstream_url(member.container)
        )

    def _route_to(self, member: Member) -> Callable[[Context], None]:
        def route(ctx: Context) -> None:
            if ctx.hold is not None:
                ctx.hold.control.route(self._url(member), member.variant)

        return route

    def _through(self, member: Member, step: Callable[[Context], T], warn: bool = True) -> T:
        """`step` through a gateway restart (`through_restarts`); `warn`: a revived gateway is
        a warning of the result (not for a route)."""
        route, warnings = self._route_to(member), self.warnings if warn else []

        def revive(ctx: Context, stopped: str) -> Context:
            return hold_again(ctx, member.variant, self.compose_file, stopped)

        return through_restarts(self.held, member.variant, route, step, revive, warnings)

    # -- containers -----------------------------------------------------------------------
    def _named(
        self, name: str, missing: str, error: type[ComposerError] = HealthCheckFailed
    ) -> VariantContainer:
        """The container `name`; `error(missing)` when there is none."""
        found = by_name(self.ctx, name)
        if found is None:
            raise error(missing)
        return found

    def sleep(self, op: ops.Stop) -> None:
        ctx = self.ctx
        began = time.monotonic()
        ctx.say(f"putting {op.member.variant} to sleep (level {ctx.stack.sleep_level})")
        serving = self._named(
            op.member.container, f"{op.member.variant}'s container {op.member.container} is gone"
        )
        standby.put_to_sleep(ctx.control(), op.member.variant, ctx.stack)
        standby.park(serving)
        self._took("sleep", time.monotonic() - began)

    def stop(self, op: ops.Stop) -> None:
        """Stop and remove the container (gone is fine), its GPUs read first for `await_release`:
        a switch's by the stack's GPU budget, its shared service's exited ones stopped with it;
        `op.live`: a member's own GPUs."""
        from composer.probes.cgroups import container_pids
        from composer.probes.gpu import detect_probe

        began, gpus = time.monotonic(), op.member.gpus
        taken: list[ReleaseWait] = []

        def read_gpus(found: VariantContainer) -> None:
            if not op.live:
                taken.append(ReleaseWait.before_stop(self.stack, self.budget, found.container.id))
            elif self.stack.gpus is not None and gpus != "-":
                devices = self.stack.gpus if gpus == "all" else tuple(gpus.split(","))
                pids = container_pids([found.container.id])
                self._releases.append(ReleaseWait.snapshot(self.probe or detect_probe(), devices, pids))

        stop_container(self.ctx, op.member.name, op.member.container, read_gpus)
        if op.live:
            return
        self._releases += taken or [ReleaseWait.before_stop(self.stack, self.budget, None)]
        for name in op.also:
            stop_container(self.ctx, op.member.variant, name)
        self._took("stop", time.monotonic() - began)

    def await_release(self, op: ops.AwaitRelease) -> None:
        """Wait for the GPUs read before each stop; the result notes how it ended."""
        while self._releases:
            took = self._releases.pop(0).wait(self.options.release_timeout, self.ctx.waiting)
            self._took("release_wait", took.seconds)
            self.notes += [took.note] if took.note else []

    def start(self, op: ops.Start) -> None:
        """Compose up the member's service from its run file, then route the gateway to it (`op.live`:
        a member, published once gated)."""
        member = op.member
        if op.live:
            start_service(self.ctx, f"{member.name} on GPUs {member.gpus}", member.run_file, member.service)
            return
        self.began = time.monotonic()
        self.brought = self.brought or op.member
        start_service(self.ctx, op.member.variant, op.member.run_file, op.member.service)
        self._through(op.member, self._route_to(op.member), warn=False)

    def wake(self, op: ops.Start) -> None:
        self.began = time.monotonic()
        self.brought = self.brought or op.member
        ctx = self.ctx
        ctx.say(f"waking {op.member.variant}")
        sleeper = self._named(
            op.member.container, f"{op.member.variant}'s sleeping container {op.member.container} is gone"
        )
        standby.wake(ctx.control(), sleeper, op.member.variant, ctx.stack)
        standby.unpark(sleeper, ctx.stack.restart)

    def adopt(self, op: ops.Start) -> None:
        """Route to the awake container; `op.live` (it joins a live set): it must still be the
        running one the plan read."""
        if op.live:
            found = self._named(op.member.container, f"{op.member.container} was not created", SwapFailed)
            if found.container.status != "running":
                raise SwapFailed(f"{op.member.container} stopped before it could join as {op.member.name}")
            return
        self.began = time.monotonic()
        self.brought = self.brought or op.member
        ctx = self.ctx
        awake = self._named(
            op.member.container, f"{op.member.variant}'s container {op.member.container} is gone"
        )
        ctx.say(f"{op.member.variant} runs awake ({op.member.container}): routing to it")
        ctx.control().route(upstream_url(awake.name), op.member.variant)
        standby.unpark(awake, ctx.stack.restart)

    def route(self, op: ops.Route) -> None:
        self.began = time.monotonic()
        self.brought = self.brought or op.member
        self.ctx.say(f"routing the gateway to {op.member.variant}")
        self._through(op.member, self._route_to(op.member), warn=False)

    def remove_container(self, op: ops.Stop) -> None:
        began = time.monotonic()
        stop_container(self.ctx, op.member.variant, op.member.container)
        if op.cause:  # planned first (an undo's is not counted)
            self._took("stop_first", time.monotonic() - began)
        if op.network_of:  # nothing ran before: the project's network goes too
            file = Path(op.network_of)
            env = compose_environment(file, self.ctx.stack.api_key)
            compose(self.ctx.stack.project, file, ["down"], env=env, timeout=120)

    # -- the gate and the watches -----------------------------------------------------------
    def gate(self, op: ops.Gate) -> None:
        """Wait until the container is ready (/health, /v1/models, one completion) through the
        gateway, or `op.live` on its own address (`_gate_direct`)."""
        if op.live:
            self._gate_direct(op)
            return
        where = gate_target(self.ctx, op.member.variant)
        container = by_name(self.ctx, op.member.container)
        self.container, self.log, self.ready_at = None, "", 0.0  # not ready until it passed

        def gate(ctx: Context) -> str:
            if container is None:
                raise HealthCheckFailed("the container was not created")
            log = wait_ready(
                container,
                ctx.past_the_hold(where),
                deadline=self.began + ctx.options.timeout,
                interval=ctx.options.poll_interval,
                waiting=ctx.waiting,
                unreachable=watch_gateway(ctx),
            )
            self.ready_at = time.monotonic()
            ctx.say(f"{where.variant} is ready ({self.ready_at - self.began:.1f}s); watching it settle")
            return log

        self.log = self._through(op.member, gate)
        self.container = container
        self._took("start_to_ready", self.ready_at - self.began)

    def settle(self, op: ops.Settle) -> None:
        """Watch the ready container, the wake checks and the warm-up beside it (clients wait
        for both; the watch fails first if the container dies)."""
        where = gate_target(self.ctx, op.member.variant)
        self.since = engine_started(op.since, self.container, self.ready_at, self.began)
        left = settle_left(op.seconds, self.since)
        container = self.container
        if container is None:  # an undo goes on after a failed gate: this one has nothing to watch
            raise HealthCheckFailed(f"{op.member.variant} did not pass its gate")

        def watch(ctx: Context) -> tuple[float, list[str], dict[str, float]]:
            began = time.monotonic()
            notes: list[str] = []
            timings: dict[str, float] = {}
            beside = beside_settle(ctx, op, where, notes, timings)
            with ThreadPoolExecutor(1, "beside-settle") as pool:  # joined before the watch's error
                done = pool.submit(beside) if beside else None
                watch_settled(
                    container, ctx.past_the_hold(where), left, ctx.options.poll_interval, watch_gateway(ctx)
                )
            if done is not None:
                done.result()  # its error after the settle watch's, which fails first
            return time.monotonic() - began, notes, timings

        took, notes, timings = self._through(op.member, watch)
        self._took("settle", took)
        self.notes += notes
        for name, seconds in timings.items():
            self._took(name, seconds)
        if op.woke and self.brought is not None and op.member.variant == self.brought.variant:
            self.timings["wake"] = self.ready_at - self.began  # wake_up until the gate passed

    def probation(self, op: ops.Probation) -> None:
        """With clients served, watch what is left of the probation (counted as the settle
        watch is); a crash, a restart or a failing `/health` fails the swap (and undoes it).
        Unless `wait_probation`, a forked watcher does it and `up` returns (`probation`)."""
        from composer.swap import probation

        ctx, variant = self.ctx, op.member.variant
        seconds = settle_left(op.seconds, self.since)
        container = self.container
        if seconds <= 0 or container is None:
            return
        until = time.time() + seconds
        clock = time.strftime("%H:%M:%S", time.localtime(until))
        self._tell_probation(variant, "running", until)
        alone = threading.current_thread() is threading.main_thread()  # a fork takes the main thread
        if alone and not ctx.options.wait_probation and self.record is not None:
            standby.updates_done()
            ctx.client.api.close()  # each process opens its own connections to the engine
            pid = probation.detach(self.stack.project)
            if pid:  # `up`: the variant serves; the watcher goes on with the swap
                self.record.handed = True
                log = probation.log_path(self.stack.project)
                self.result.probation = {
                    "until": datetime.fromtimestamp(until, UTC).isoformat(timespec="seconds"),
                    "pid": pid,
                    "log": str(log),
                    "outcome": "running",
                }
                ctx.say(
                    f"{variant} serves; on probation until {clock} in the background (pid {pid}): a "
                    "crash or a restart rolls it back; `compose-spec status` shows it, its log is "
                    f"{log}"
                )
                return
            self.record.hand_over(probation.STAGE, until)
        ctx.say(
            f"{variant} serves; watching it {seconds:.0f}s more, until {clock} (stack.probation): "
            "a crash or a restart rolls it back"
        )
        began = time.monotonic()
        where = gate_target(ctx, variant)
        ended = False  # a new change ended the probation early
        try:
            with probation.ending() if probation.is_watcher() else contextlib.nullcontext():
                watch_probation(container, where, seconds, PROBATION_INTERVAL, watch_gateway(ctx))
        except probation.ProbationEnded:
            ended = True
        except BaseException as err:  # the undo that follows is a switch of its own on the page
            self._tell_probation(variant, "failed" if isinstance(err, Exception) else "interrupted")
            raise
        outcome = "ended early" if ended else "passed"
        self._tell_probation(variant, outcome)
        self.timings["probation"] = time.monotonic() - began
        if probation.is_watcher():  # the watcher's history line says how the probation ended
            self.result.probation = {"outcome": outcome}
        if ended:
            self.notes.append(f"{variant}'s probation was ended by a new change of the project")
            return
        self.notes.append(f"{variant} ran {seconds:.0f}s on probation without a crash or a restart")

    def _tell_probation(self, variant: str, state: str, until: float | None = None) -> None:
        """The gateway's status page shows the probation (best effort: the page is a view)."""
        hold = self.ctx.hold
        if hold is not None:
            with contextlib.suppress(ComposerError), interrupts_ignored():
                hold.control.report_probation(variant, state, until)

    # -- a live change's members ----------------------------------------------------------
    def _control(self) -> GatewayControl | None:
        from composer.gateway.host.client import GatewayControl

        gateway = running_gateway(self.stack, self.client, self.say)  # a stopped one started again
        return GatewayControl(gateway) if gateway is not None else None

    def _address(self, container: VariantContainer) -> str:
        """The container's address on the project's network (the gate reaches it directly)."""
        container.container.reload()
        networks = container.container.attrs.get("NetworkSettings", {}).get("Networks") or {}
        for network in networks.values():
            if network.get("IPAddress"):
                return str(network["IPAddress"])
        raise SwapFailed(f"{container.name} has no address on the project's network")

    def _gate_direct(self, op: ops.Gate) -> None:
        """The swap's gate on the member's own address, a settle watch, and for a speculative
        variant its acceptance over a short warm-up (`live_acceptance`)."""
        began = time.monotonic()
        container = self._named(op.member.container, f"{op.member.container} was not created", SwapFailed)
        target = GateTarget(
            op.member.name,
            CONTAINER_PORT,
            self._address(container),
            self.stack.served_model_name,
            self.stack.api_key,
        )
        interval, mend = self.options.poll_interval, self._mend_port
        wait_ready(container, target, began + self.options.timeout, interval, self.ctx.waiting, mend)
        ready = time.monotonic() - began
        self.timings[f"{op.member.name} start_to_ready"] = ready
        self.say(f"{op.member.name} is ready ({ready:.1f}s); watching it settle")
        watch_settled(container, target, self.options.settle, interval)
        if op.member.speculative:
            rate = live_acceptance(target, self.stack.acceptance_floor)
            self.say(f"{op.member.name} accepts {rate:.2f} of its draft tokens")

    def _mend_port(self) -> None:
        """Between a member's probes (it is reached directly): the port holder and the gateway
        started again when they stopped, so clients are served meanwhile."""
        running_gateway(self.stack, self.client, self.say)

    def publish(self, op: ops.Publish) -> None:
        if control := self._control():
            set_upstreams(control, [dict(u) for u in op.upstreams], op.single)

    def drain(self, op: ops.Drain) -> None:
        if control := self._control():
            self.drained.drain(control, self.stack, self.ctx.waiting, op, op.name)

    # -- the change -----------------------------------------------------------------------
    def answers(self, names: str) -> None:
        """A gateway this change started answers through the published port and reaches the
        set before `up` returns: the first request after it is neither refused nor reset."""
        from composer.engine.published_port import ANSWER_TIMEOUT, wait_published

        gateway = gateway_container(self.stack, self.client)
        published = wait_published(gateway, self.stack) if gateway is not None else None
        if published is None or not published.answers:
            detail = published.detail if published is not None else "its container is gone"
            raise SwapFailed(f"the started gateway does not answer through the published port: {detail}")
        control = self._control()
        if control is not None and not control.wait_ready(ANSWER_TIMEOUT):
            self.say(f"the gateway answers but does not reach {names} after {ANSWER_TIMEOUT:.0f}s")

    # -- the run's moments (`composer.swap.runner`) ---------------------------------------
    def failed(self, plan: Plan, op: Op, err: BaseException) -> None:
        """Before the undo removes the failed variant (a live member that failed to start or
        pass its gate, or a switch's target): keep its log and show its tail."""
        ctx = self.ctx
        kept = not ctx.options.rollback
        if isinstance(op, ops.Start | ops.Gate) and op.live and op.how != "adopt":
            cause = "interrupted" if isinstance(err, KeyboardInterrupt) else str(err).splitlines()[0]
            tail = bootlog.redact(err.log_tail if isinstance(err, DiagnosedError) else "", ctx.stack.api_key)
            container = op.member.container
            evidence.keep(ctx.stack, ctx.client, op.member.variant, cause, tail, ctx.say, container, kept)
            self.kept = bool(tail)
            self._never_restarted(container)
            return
        if isinstance(err, KeyboardInterrupt):
            self.cause = "interrupted"
        else:
            self.cause = (
                str(err) if isinstance(err, ComposerError) else f"unexpected {type(err).__name__}: {err}"
            )
        brought = _brought(plan)
        if brought is None or not plan.single:  # only the gateway changed, or a set's member: no log
            return
        diagnosed = err if isinstance(err, DiagnosedError) else None
        tail = diagnosed.log_tail if diagnosed is not None else ""
        if not tail:
            try:
                found = by_name(ctx, brought.container)
                tail = bootlog.tail(found.first_run_log(tail=60), 40) if found is not None else ""
            except Exception:  # Docker gone: the failure itself is reported, without a log
                tail = ""
        self.tail = bootlog.redact(tail, ctx.stack.api_key)
        self.hints = (diagnosed.hints if diagnosed is not None else ()) or tuple(diagnose.hints(self.tail))
        evidence.keep(ctx.stack, ctx.client, plan.target, self.cause, self.tail, ctx.say, kept=kept)
        self._never_restarted(brought.container)
        if ctx.options.rollback and plan.serving is not None:
            ctx.say(f"rolling back to {plan.serving}")

    def _never_restarted(self, name: str) -> None:
        """With --no-rollback, the failed container is left for a look, but never restarted
        by its restart policy: a crash leaves it exited, not crash-looping nor counted as serving."""
        if not self.ctx.options.rollback and (found := by_name(self.ctx, name)) is not None:
            standby.park(found)

    def explain(self, plan: Plan, err: BaseException, ran: list[Op], undone: Undone | None) -> SwapFailed:
        """The error: the cause first, then what the undo did (or that there was none)."""
        only_gateway = all(isinstance(op, ops.UpdateGateway) for op in plan.ops)
        if only_gateway or (plan.single and _brought(plan) is None):  # no variant comes in
            return SwapFailed(self.cause or f"{type(err).__name__}: {err}")
        if not plan.single:  # a live change: what failed, and that the set serves as before
            failure = explain_failure(err, ran, undone)
            failure.log_tail = bootlog.redact(failure.log_tail, self.stack.api_key)
            failure.tail_shown = self.kept
            return failure
        message = f"{plan.target} failed: {self.cause}"
        removal = [why for op, why in undone or () if op.how == "remove"]
        others = [why for op, why in undone or () if op.how != "remove"]
        if removal:
            message += f"; could not remove it: {removal[0]}"
        previous = plan.serving
        if undone is None:
            failure = SwapFailed(f"{message}; rollback disabled (--no-rollback): what ran is left as it is")
        elif previous is None:
            failure = SwapFailed(f"{message}; nothing is running", rolled_back=False)
        elif others:
            failure = SwapFailed(
                f"{message}; rollback to {previous} failed too: {others[0]}", rolled_back=False
            )
        else:
            failure = SwapFailed(
                f"{message}; rolled back to {previous}, which serves again", rolled_back=True
            )
        failure.log_tail, failure.hints = self.tail, self.hints
        failure.tail_shown = True  # evidence.keep printed it before the undo
        return failure

    def finish(self, plan: Plan, failure: SwapFailed | None, result: UpResult) -> None:
        """The held requests flow to what serves after a failure (the gateway is told why); what
        the drains counted, and what serves at the end (its container, its KV cache)."""
        ctx = self.ctx  # (the runner calls it with stop signals ignored)
        if ctx.hold is not None and not self.released:  # a hold never outlasts `up`, --no-rollback or not
            serving = plan.serving if failure is not None and failure.rolled_back else None
            detail = str(failure).splitlines()[0] if failure is not None else ""
            self._release(serving, ok=False, detail=detail)
        standby.updates_done()
        self.drained.report(result, live=not plan.single)
        if failure is not None or not plan.single:
            return
        container = self.container
        result.kv_cache_tokens = bootlog.kv_cache_tokens(self.log)
        if container is not None:
            started, restarts, _ = run_mark(container)
            result.serving_container = {
                "id": container.container.id,
                "name": container.name,
                "started_at": started,
                "restart_count": restarts,
            }


def _pointing(route: tuple[dict[str, str], ...]) -> Callable[[Container], object] | None:
    """How a new gateway is pointed at `route` (`UpdateGateway.route`) before it takes the port."""
    from composer.gateway.host.client import GatewayControl

    if not route:
        return None
    if "name" in route[0]:  # the live set's members
        return lambda c: GatewayControl(c).set_upstreams(list(route))
    return lambda c: GatewayControl(c).route(route[0]["url"], route[0].get("variant"))


def _brought(plan: Plan) -> Member | None:
    """What a switch brings in (its first Start or Route); None when only the gateway changes."""
    return next((op.member for op in plan.ops if isinstance(op, ops.Start | ops.Route)), None)


def set_upstreams(control: GatewayControl, upstreams: list[dict[str, str]], single: str = "") -> None:
    """Tell the gateway the live set it routes among (`[]`: the single upstream, which serves
    `single` when given); SwapFailed when it does not take it."""
    try:
        control.set_upstreams(upstreams, single or None)
    except GatewayControlError as err:
        raise SwapFailed(
            f"the gateway did not take the live set ({', '.join(u['name'] for u in upstreams)}): {err}; "
            "a gateway image without live sets needs a rebuild (bash images/gateway/build.sh)"
        ) from err


def single_inflight(raw: Mapping[str, Any] | None) -> int:
    """The gateway's requests in flight on its single member (its entry of `upstreams`; not
    listed: none); from an older gateway image, `single_outstanding`, else every forwarded
    request less those on live upstreams."""
    raw = raw or {}
    states = upstream_states(raw)
    if SINGLE in states or "generation" in raw:
        return max(0, int(states.get(SINGLE, {}).get("outstanding") or 0))
    if "single_outstanding" in raw:
        return max(0, int(raw["single_outstanding"] or 0))
    live = sum(int(u.get("outstanding") or 0) for u in states.values())
    return max(0, int(raw.get("inflight") or 0) - live)


@dataclass
class DrainTally:
    """What a change's holds and drains counted (both engines): requests that finished and that
    were cut at the drain timeout, streams continued elsewhere and streams refused (they drained)."""

    finished: int = 0
    cut: int = 0
    continued: int = 0
    refused: int = 0
    holds: int = 0  # holds counted (a switch reports what finished only when one was)

    def held(self, *counts: int) -> None:
        """Add a hold's counts (finished, cut, continued, refused)."""
        for name, n in zip(DRAINED, counts, strict=True):
            setattr(self, name, getattr(self, name) + n)
        self.holds += 1

    def drain(self, control: GatewayControl, stack: Stack, waiting: Say, op: ops.Drain, where: str) -> None:
        """Wait for the requests in flight on the member `op.name` (an upstream the gateway does
        not know has none), or without `op.live` on the gateway's single upstream (`where`)."""
        if not op.live:
            self.single(control, stack, waiting, where)
            return
        try:
            drained = control.drain_upstream(
                op.name, stack.gateway.drain_timeout, op.continue_streams, stack.max_model_len
            )
        except GatewayControlError:
            return
        self.cut += 0 if drained.done else drained.outstanding
        self.continued += drained.continued
        self.refused += drained.refused

    def single(self, control: GatewayControl, stack: Stack, waiting: Say, container: str) -> None:
        """Wait until nothing is in flight on the gateway's single upstream, or the drain
        timeout; what still runs then is counted cut (nothing when the gateway cannot say)."""

        def left() -> int:
            try:
                running = single_inflight(control.state().raw)
            except GatewayControlError:
                return 0
            if running:
                waiting(f"draining {container} ({running} in flight)")
                raise retry.Pending(f"{running} in flight on {container}", running)
            return 0

        self.cut += int(retry.single_drain(stack.gateway.drain_timeout)(left) or 0)

    def report(self, result: UpResult, live: bool = True) -> None:
        """The counts in `result.drained`: a live change's, with a warning when something was
        cut; a switch's (its hold warned already), what finished too, when it held."""
        if not live:
            if self.holds:
                result.drained = {name: getattr(self, name) for name in DRAINED}
            return
        result.drained = {"cut": self.cut, "continued": self.continued, "refused": self.refused}
        if self.cut:
            result.warnings.append(f"{self.cut} request(s) still running after the drain timeout were cut")


def upstream_states(raw: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per-upstream fields of the gateway's state (`upstreams`: a list or a mapping by name);
    empty when the gateway does not report them."""
    found = (raw or {}).get("upstreams")
    if isinstance(found, Mapping):
        return {str(k): dict(v) for k, v in found.items() if isinstance(v, Mapping)}
    if isinstance(found, list):
        return {str(u.get("name")): dict(u) for u in found if isinstance(u, Mapping) and u.get("name")}
    return {}


def live_acceptance(target: GateTarget, floor: float) -> float:
    """A speculative variant's acceptance over a short warm-up, from its own /metrics at
    `target` (its own address): above `floor`, or HealthCheckFailed (Docker and Kubernetes)."""
    import httpx

    def counters() -> tuple[float, float]:
        try:
            reply = httpx.get(f"{target.url}/metrics", timeout=30.0, trust_env=False)
            return standby.spec_counters(reply.text)
        except (httpx.HTTPError, ValueError) as err:
            raise HealthCheckFailed(f"{target.variant}: /metrics could not be read: {err}") from err

    return standby.check_acceptance(counters, target, floor)
