"""The gateway's published port, end to end: what `status` says about it, and
`up --recreate-gateway`, which replaces only the gateway's container (and its port holder when
Docker's forwarding of the port is gone) beside the old one, so the port stays open and the
serving variant (or live set) keeps serving; what the port did meanwhile is measured. It runs
as every change does (`composer.swap.runner`: a running record and a history line).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine.containers import upstream_url
from composer.engine.health import base_url
from composer.engine.published_port import probe_published
from composer.errors import ComposerError, UsageError
from composer.gateway.host.client import GatewayControl
from composer.render.files import run_file
from composer.render.live import resolve_live
from composer.render.target import resolve_target
from composer.stack.model import Stack
from composer.swap import ops, runner, snapshot
from composer.swap.entry import live_run_file
from composer.swap.execute import Say, quiet
from composer.swap.gateway_replace import (
    PORT_BACK_TIMEOUT,
    repair_port,
    retire_extra_gateways,
)
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.plan import Plan
from composer.swap.probation import change_lock
from composer.swap.runner import Change
from composer.swap.transaction import Context, DockerSwap

if TYPE_CHECKING:
    import docker

    from composer.render.gateway import GatewaySpec


def port_is_dead(gateway: object) -> bool:
    """True when `status`'s gateway entry says Docker's port proxy is gone."""
    if not isinstance(gateway, dict):
        return False
    published = gateway.get("published_port")
    return isinstance(published, dict) and bool(published.get("dead"))


def plan_recreate(stack: Stack, client: docker.DockerClient) -> Plan:
    """`up --recreate-gateway --dry-run`: reads only (no lock, nothing changed)."""
    _need_gateway(stack)
    snap = snapshot.take(stack, client)
    run_file, _, route, _ = _what_serves(stack, snap)
    return recreate_plan(snap, str(run_file), base_url(stack.bind_address, stack.port), route)


def recreate_plan(
    snap: snapshot.Snapshot,
    run_file: str,
    url: str,
    route: tuple[dict[str, str], ...] = (),
    holder: bool = False,
) -> Plan:
    """The gateway replaced from `run_file` (pure), pointed at `route` first (`holder`: its port
    holder too): what serves (the live set, else the serving variant) serves throughout; the
    published port at `url` is probed meanwhile."""
    serving = snap.serving
    names = tuple(r.name for r in snap.live_running if r.service) or ((serving.variant,) if serving else ())
    started = "" if snap.gateway is not None else "no gateway container runs: one is started; "
    probed = f"{started}{url} is probed meanwhile (`up` measures and reports it)"
    why = "--recreate-gateway" + (
        " (and its port holder: Docker's forwarding of the port was gone)" if holder else ""
    )
    replace = ops.UpdateGateway("replace", run_file, why, route=route, holder=holder)
    return Plan(names, names, (replace,), (probed,))


RECREATED = "gateway-recreated"  # the outcome of `up --recreate-gateway`


def recreate_gateway(
    stack: Stack, client: docker.DockerClient, *, wait_for_lock: bool = True, progress: Say = quiet
) -> UpResult:
    """Recreate only the gateway's container under the project's swap lock; the result's first
    note says what was done and what serves through it (`gateway recreated (...): ...`)."""
    with change_lock(stack.project, wait_for_lock, progress):
        snap = snapshot.take(stack, client)
        retire_extra_gateways(client, snap.extra_gateways, progress)
        _need_gateway(stack)
        if repaired := repair_port(stack, client, progress, snap.gateway):  # the holder stopped: mended
            progress(repaired)
            snap = snapshot.take(stack, client)
        began = time.monotonic()
        old = snap.gateway
        # Docker's forwarding of the port is gone: the port holder, which publishes it, is new too
        dead = old is not None and old.status == "running" and probe_published(old, stack).dead
        compose_file, spec, route, serving = _what_serves(stack, snap)
        progress(f"recreating the gateway ({serving or 'no variant'} keeps running)")
        plan = recreate_plan(snap, str(compose_file), base_url(stack.bind_address, stack.port), route, dead)
        result = UpResult(serving or "", RECREATED)
        ctx = Context(stack, client, UpOptions(), progress, progress)
        engine = DockerSwap(ctx, result, spec)
        runner.run(plan, engine, result, Change.of(ctx, rollback=False), began)
        done = engine.replaced
        if done is None:  # the plan's one operation ran, or the run raised
            raise ComposerError("the gateway was not replaced")
        gateway, published = done.container, done.published
        if serving is not None:
            progress(f"waiting for the gateway to reach {serving}")
            if not GatewayControl(gateway).wait_ready(PORT_BACK_TIMEOUT):
                raise ComposerError(
                    f"the recreated gateway answers on {published.url} but does not reach {serving} "
                    f"within {PORT_BACK_TIMEOUT:.0f}s: `compose-spec status` shows why"
                )
        who = f"{serving} serves through it again" if serving else "no variant serves"
        holder = " and its port holder (Docker's forwarding of the port was gone)" if dead else ""
        result.notes.insert(0, f"gateway recreated{holder} ({gateway.name}): {published.url} answers; {who}")
        return result


def _need_gateway(stack: Stack) -> None:
    if not stack.gateway.enabled:
        raise UsageError(
            "--recreate-gateway: this stack runs without a gateway (gateway.enabled = false); "
            "the variant publishes the port: `compose-spec up VARIANT` restarts it"
        )


def _what_serves(
    stack: Stack, snap: snapshot.Snapshot
) -> tuple[Path, GatewaySpec | None, tuple[dict[str, str], ...], str | None]:
    """The run file the new gateway is made from, its spec, what it is pointed at before it
    takes the port (`UpdateGateway.route`), and what serves, in words."""
    live = [
        {"name": r.name, "variant": r.variant, "url": upstream_url(r.service)}
        for r in snap.live_running
        if r.service
    ]
    if live:
        target = resolve_live(stack, list(dict.fromkeys(u["variant"] for u in live)))
        names = ", ".join(u["name"] for u in live)
        return live_run_file(target), target.gateway, tuple(live), f"the live set {names}"
    member = snap.serving
    variant = member.variant if member is not None else None
    single = resolve_target(stack, variant if variant in stack.variants else next(iter(stack.variants)))
    # the serving variant's run file, else the target's (every run file describes the same gateway)
    recorded = member.info.config_file if member is not None else None
    compose_file = Path(recorded) if recorded and Path(recorded).is_file() else run_file(single)
    standby = member.container.name if member is not None and member.standby_service else None
    route = ({"url": upstream_url(standby), "variant": variant or ""},) if standby else ()
    return compose_file, single.gateway, route, variant
