"""The swap's steps: one small function per kind, each returning its outcome.

Every step takes a `Context` (the stack, the Docker client, the options, where to say
things, and the gateway's hold once there is one: collaborators, never step state) and
what the plan says, does one thing, and returns an `Outcome` (its seconds, notes,
warnings and what it produced: a hold, a container, the boot log). The single switch's
executor (`transaction.SingleSwap`) calls them from its handlers and folds the outcomes into
the swap's result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine.client import compose
from composer.engine.containers import holder_kept
from composer.engine.gate import GateTarget, wait_ready, watch_settled
from composer.engine.port_gap import PortGap
from composer.errors import GatewayControlError, HealthCheckFailed, SwapFailed
from composer.render.gateway import SERVICE as GATEWAY_SERVICE
from composer.render.runfiles import compose_environment
from composer.swap import standby
from composer.swap.holding import SwapHold, start_hold, warm_up

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from composer.engine.variant_container import VariantContainer
    from composer.gateway.client import GatewayControl
    from composer.render.gateway import GatewaySpec
    from composer.stack.model import Stack
    from composer.swap.swapper import UpOptions

Say = Callable[[str], None]
UPSTREAM_WAIT_S = 30.0
"""How long a recreated gateway has to reach the serving variant before it is put to sleep."""


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Context:
    """The collaborators every step uses; `hold` is set once the gateway is drained."""

    stack: Stack
    client: docker.DockerClient
    options: UpOptions
    say: Say = _quiet
    waiting: Say = _quiet
    hold: SwapHold | None = None

    def control(self) -> GatewayControl:
        """The gateway's control channel of this swap's hold."""
        if self.hold is None:
            raise SwapFailed("sleep standby needs the gateway's control channel, which is not held")
        return self.hold.control

    def past_the_hold(self, target: GateTarget) -> GateTarget:
        """The gate's target, carrying the hold's probe token when the gateway holds clients."""
        return replace(target, headers=self.hold.headers) if self.hold is not None else target


@dataclass
class Outcome:
    """What one step did."""

    step: str
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    drained: tuple[int, int, int, int] | None = None  # (finished, cut, continued, refused)
    hold: SwapHold | None = None
    container: VariantContainer | None = None
    log: str = ""
    ready_at: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)  # more timings, by name
    port_gap: PortGap | None = None  # the published port while the gateway's container changed


def compose_up(
    ctx: Context,
    compose_file: Path,
    service: str | None = None,
    host: dict[str, str] | None = None,
    recreate: bool = True,
) -> None:
    """`docker compose up -d` of one service of a run file (never builds, never pulls);
    `host`: host values the file interpolates, set exactly (the follow profile's paths);
    `recreate=False`: an existing container is kept as it is (a gateway whose settings
    were applied in place differs from the file only in them). The gateway's port holder
    is left alone while it holds the port (`holder_kept`)."""
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


def drain(
    ctx: Context,
    target: str,
    compose_file: Path | None,
    gateway: GatewaySpec,
    ensure: bool = True,
    opened: SwapHold | None = None,
    recreate: bool = True,
) -> Outcome:
    """Make sure the gateway runs (`ensure`; `recreate=False`: a running one is kept as it is),
    then hold new requests and let in-flight ones finish (eligible streams are paused to go
    on on the next variant instead, unless `up --drain`).

    `opened`: a hold whose control session is already open (`holding.EarlyHold`), used as is.
    """
    if ensure and compose_file is not None:
        compose_up(ctx, compose_file, gateway.service, recreate=recreate)
    hold = opened or start_hold(
        ctx.stack,
        ctx.client,
        ctx.stack.gateway.drain_timeout,
        ctx.say,
        target=target,
        container=_gateway(ctx, gateway),
        waiting=ctx.waiting,
    )
    # the progress line shows it while something runs
    drained = hold.begin(ctx.stack.gateway.continues(ctx.options.drain))
    counts = (drained.drained, drained.cut, drained.continued, drained.refused)
    out = Outcome("drain", drained.seconds, drained=counts, hold=hold)
    if drained.cut:
        out.warnings.append(
            f"{drained.cut} request(s) still running after the drain timeout "
            f"({ctx.stack.gateway.drain_timeout}s) were cut"
        )
    return out


def _gateway(ctx: Context, gateway: GatewaySpec) -> Container | None:
    """The gateway's container by the name compose gives it (one inspection, no listing)."""
    from docker.errors import NotFound

    try:
        return ctx.client.containers.get(gateway.container_name)
    except NotFound:
        return None


def gateway_stopped(ctx: Context) -> str | None:
    """How the stack's gateway container stopped ("exited with code 137", "removed"), or
    None while it runs (or the stack has no gateway, or Docker does not answer: the step
    that needs Docker reports that itself)."""
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
        return None
    return f"exited with code {state.get('ExitCode')}"


def watch_gateway(ctx: Context) -> Callable[[], None] | None:
    """For the gate and the settle watch of a held swap: raises GatewayControlError when the
    gateway that carries the probes is no longer running (None without a hold)."""
    if ctx.hold is None:
        return None

    def check() -> None:
        stopped = gateway_stopped(ctx)
        if stopped is not None:
            raise GatewayControlError("probe", f"the gateway container {stopped}")

    return check


def hold_again(ctx: Context, target: str, compose_file: Path | None = None, why: str = "") -> Context:
    """The gateway restarted (`compose_file` None) or stopped (`why`; started again from the
    run file) during the swap, and its hold is gone with it: hold it again (a new hold, a new
    probe token)."""
    from composer.render.gateway import build_gateway_spec

    gateway = build_gateway_spec(ctx.stack)
    if gateway is None:
        raise SwapFailed("the gateway's hold is gone and there is no gateway to hold again")
    if ctx.hold is not None:
        ctx.hold.end()  # stops its renewals; the old gateway's holds are gone with it
    started = f"the gateway stopped during the swap ({why}): starting it again"
    ctx.say(started if compose_file else "the gateway restarted during the swap: holding its requests again")
    return replace(ctx, hold=drain(ctx, target, compose_file, gateway, ensure=compose_file is not None).hold)


def find_upstream(ctx: Context, upstream: str, variant: str) -> None:
    """A gateway recreated by this swap routes to the container the old one served from and
    waits (bounded) until it reaches it, before it is asked to put it to sleep."""
    if ctx.hold is None:
        return
    ctx.hold.control.route(upstream)
    if not ctx.hold.control.wait_ready(UPSTREAM_WAIT_S):
        ctx.say(f"the new gateway does not reach {variant} after {UPSTREAM_WAIT_S:.0f}s")


def hold_lost(err: BaseException) -> bool:
    """The gateway refused the swap's probe token: it restarted, and its hold is gone."""
    return isinstance(err, HealthCheckFailed) and "refused the swap's probe token" in str(err)


def gateway_update(ctx: Context, compose_file: Path, gateway: GatewaySpec) -> Outcome:
    """Replace the gateway's container with one of the new settings
    (`gateway_port.replace_gateway`): the new one starts beside the old one in the port
    holder's network and the old one then finishes its requests, so the port never closes;
    what the port did meanwhile is measured (`Outcome.port_gap`), and the old one's requests
    are counted: finished, or cut at its drain timeout."""
    from composer.swap.gateway_replace import replace_gateway

    ctx.say("the gateway needs a new container: replacing it")
    began = time.monotonic()
    done = replace_gateway(ctx.stack, ctx.client, compose_file, gateway, ctx.say)
    gap = done.port_gap
    out = Outcome("drain", time.monotonic() - began, drained=(done.finished, done.cut, 0, 0), port_gap=gap)
    out.extra["gateway_recreate"] = out.seconds
    how = (
        "beside the old one, which then finished"
        if done.handed_over
        else "after the old one stopped, which finished"
    )
    cut_text = f", {done.cut} cut" if done.cut else ""
    out.notes.append(
        f"the gateway was replaced by a new container with its new settings, started {how} "
        f"{done.finished} request(s){cut_text}; {gap.line()}"
    )
    if done.cut:
        out.warnings.append(
            f"{done.cut} request(s) were still running on the old gateway at its drain timeout and were cut: "
            "clients retry them"
        )
    return out


def apply_settings(
    ctx: Context,
    gateway: GatewaySpec,
    settings: dict[str, str],
    keys: str,
    control: GatewayControl | None = None,
) -> Outcome:
    """Apply the gateway's changed settings in place: the same container serves on, nothing is
    drained or refused (a refusal changes nothing and fails the swap before anything else).
    `control`: a control session already open to it (else one `docker exec`)."""
    from composer.gateway.client import GatewayControl

    began = time.monotonic()
    if control is None:
        container = _gateway(ctx, gateway)
        if container is None:
            raise SwapFailed("the gateway's container is gone: its settings cannot be applied")
        control = GatewayControl(container)
    ctx.say(f"applying the gateway's changed settings in place ({keys})")
    try:
        control.apply_settings(settings)
    except GatewayControlError as err:
        raise SwapFailed(f"the gateway refused its new settings: {err}") from err
    out = Outcome("gateway_settings", time.monotonic() - began)
    out.notes.append(
        f"the gateway's settings were applied in place ({keys}): same container, no request held or refused"
    )
    return out


def by_name(ctx: Context, name: str) -> VariantContainer | None:
    """A container by its name (one inspection, no listing); None when there is none."""
    from docker.errors import NotFound

    from composer.engine.variant_container import VariantContainer

    try:
        return VariantContainer(ctx.client.containers.get(name))
    except NotFound:
        return None


def gate(ctx: Context, target: GateTarget, started: float, container: VariantContainer | None) -> Outcome:
    """Wait until the container is ready (/health, /v1/models, one completion); its boot log."""
    if container is None:
        raise HealthCheckFailed("the container was not created")
    log = wait_ready(
        container,
        ctx.past_the_hold(target),
        deadline=started + ctx.options.timeout,
        interval=ctx.options.poll_interval,
        waiting=ctx.waiting,
        unreachable=watch_gateway(ctx),
    )
    ready_at = time.monotonic()
    ctx.say(f"{target.variant} is ready ({ready_at - started:.1f}s); watching it settle")
    return Outcome("start_to_ready", ready_at - started, container=container, log=log, ready_at=ready_at)


def warm(ctx: Context, target: GateTarget, requests: int | None = None) -> Outcome:
    """Short completions past the hold, so the first client does not pay the first request
    (`requests`, by default the stack's `gateway.warmup_requests`)."""
    count = ctx.stack.gateway.warmup_requests if requests is None else requests
    took = warm_up(ctx.past_the_hold(target), count)
    out = Outcome("warmup", sum(took))
    if took:
        out.notes.append(
            "warm-up before clients (during the settle watch): "
            + ", ".join(f"{t:.2f}s" for t in took)
            + " per request"
        )
    return out


def settle(
    ctx: Context,
    target: GateTarget,
    container: VariantContainer,
    seconds: float,
    beside: Callable[[], Outcome] | None = None,
) -> Outcome:
    """Watch the ready container for `seconds` while `beside` (warm-up, wake checks) runs on it.

    Clients are released only when both are over; the watch fails first if the container dies.
    """
    began = time.monotonic()
    done: list[Outcome] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(beside())  # type: ignore[misc]
        except Exception as err:  # reported after the settle watch, which fails first if it fails
            failed.append(err)

    thread = threading.Thread(target=run, name="beside-settle", daemon=True) if beside else None
    if thread is not None:
        thread.start()
    try:
        watch_settled(
            container, ctx.past_the_hold(target), seconds, ctx.options.poll_interval, watch_gateway(ctx)
        )
    finally:
        if thread is not None:
            thread.join()
    if failed:
        raise failed[0]
    out = Outcome("settle", time.monotonic() - began)
    for other in done:
        out.notes += other.notes
        out.warnings += other.warnings
        out.extra.update(other.extra)
    return out


def wake_checks(ctx: Context, variant: str, acceptance: bool, gate_target: GateTarget) -> Outcome:
    """After a wake: `/is_sleeping` false and (`acceptance`, a speculative variant) acceptance
    above the floor."""
    out = Outcome("wake_checks")
    standby.check_awake(ctx.control(), variant)
    if acceptance:
        began = time.monotonic()
        rate = standby.check_acceptance(
            ctx.control(), ctx.past_the_hold(gate_target), variant, ctx.stack.acceptance_floor
        )
        out.notes.append(f"acceptance after the wake: {rate:.2f}")
        out.extra["acceptance_check"] = time.monotonic() - began
    return out


def release(ctx: Context, serving: str | None = None, ok: bool | None = None, detail: str = "") -> Outcome:
    """The held requests flow to what serves now (the gateway is told what that is)."""
    if ctx.hold is None:
        return Outcome("release")
    began = time.monotonic()
    note = ctx.hold.end(serving, ok=ok, detail=detail)
    return Outcome("release", time.monotonic() - began, notes=[note] if note else [])


def tell_serving(ctx: Context, variant: str) -> None:
    """A recreated gateway with switching settings learns which variant serves."""
    from composer.errors import ComposerError

    if ctx.hold is not None and ctx.stack.gateway.switches:
        try:
            ctx.hold.control.report_serving(variant)
        except ComposerError as err:
            ctx.say(f"the gateway was not told that {variant} serves: {err}")
