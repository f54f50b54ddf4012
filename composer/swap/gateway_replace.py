"""A gateway container replaced without closing the port.

The port holder (`gateway-port`, see templates/gateway-service.yml.j2) publishes the shared
port; the gateway joins its network and listens with SO_REUSEPORT. `replace_gateway` starts
the new gateway beside the old one (compose `--scale` 2, nothing recreated), waits for its
control channel (its port listens before it), configures it, then stops the old one: it
closes its listener (the kernel moves connections it has not accepted to the new one,
tcp_migrate_req) and finishes its requests, for up to its drain timeout. When there is no
holder with the stack's port (a first start, another port, an older gateway that publishes
the port itself), compose recreates both and the port is closed meanwhile. Either way the
published port is probed throughout (`composer.engine.port_gap`) and the gap reported.

`repair_port` mends the pair in place when the holder stopped (a `docker kill`, a crash Docker
did not restart) or was restarted after the gateway joined it: the gateway then serves from a
network Docker took down, and the port refuses everything while both show `Up`. It starts the
holder and restarts the gateway, which joins the holder's network anew.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine import retry
from composer.engine.client import compose
from composer.engine.containers import (
    gateway_container,
    gateway_containers,
    holds_the_port,
    network_owner,
    port_holder,
)
from composer.engine.health import base_url
from composer.engine.port_gap import SERVED_WAIT_S, PortGap, PortWatch
from composer.engine.published_port import wait_published
from composer.engine.retry import Pending
from composer.errors import ComposerError, GatewayControlError
from composer.gateway.host.client import GatewayControl
from composer.render.gateway import SERVICE
from composer.render.runfiles import compose_environment
from composer.stack.model import Stack
from composer.swap.execute import Say
from composer.swap.gateway_change import container_env

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from composer.engine.published_port import PublishedPort
    from composer.render.gateway import GatewaySpec

PORT_BACK_TIMEOUT = 60.0
"""Seconds a new gateway has to answer on its control channel and through the published port."""


@dataclass(frozen=True)
class Replacement:
    """A gateway container replaced: the new one, the port meanwhile (measured), whether the
    old one handed the port over, and its requests at its stop: finished, or cut."""

    container: Container
    published: PublishedPort
    port_gap: PortGap
    handed_over: bool
    finished: int = 0
    cut: int = 0


def replace_gateway(
    stack: Stack,
    client: docker.DockerClient,
    compose_file: Path,
    spec: GatewaySpec | None,
    say: Say,
    configure: Callable[[Container], object] | None = None,
    *,
    new_holder: bool = False,
) -> Replacement:
    """Replace the gateway's container with one made from `compose_file`, the port watched (see
    above); `configure` sets the new one up first; `new_holder`: compose recreates the holder too."""
    service = spec.service if spec else "gateway"
    name = spec.container_name if spec else f"{stack.project}-{service}-1"
    env = compose_environment(compose_file, stack.api_key)
    olds = gateway_containers(stack, client)
    running = [c for c in olds if c.status == "running"]
    holder = port_holder(stack, client)
    hand_over = (
        not new_holder
        and holder is not None
        and bool(running)
        and holds_the_port(holder, stack)
        and all(network_owner(c).id == holder.id for c in running)
    )
    with PortWatch(base_url(stack.bind_address, stack.port)) as watch:
        if hand_over:
            for stopped in (c for c in olds if c.status != "running"):
                stopped.remove(force=True)
            say("starting the new gateway beside the old one (the port stays open)")
            args = ["--no-deps", "--no-recreate", "--scale", f"{service}={len(running) + 1}"]
            compose(stack.project, compose_file, [*UP, *args, service], env=env, timeout=120)
            known = {c.id for c in running}
            new = next((c for c in gateway_containers(stack, client) if c.id not in known), None)
            if new is None:
                raise ComposerError("the new gateway's container was not created: `docker ps -a`")
            _ready(new, configure)
            finished, cut = _retire(running, say)
            with contextlib.suppress(Exception):  # the name users and docs know
                new.rename(name)
                new.reload()
        else:
            for old in (c for c in olds if network_owner(c).id == c.id):
                old.remove(force=True)  # an older gateway holds the port the holder needs
            renew = ["--always-recreate-deps"] if new_holder else []
            compose(
                stack.project, compose_file, [*UP, "--force-recreate", *renew, service], env=env, timeout=120
            )
            new = gateway_container(stack, client)
            if new is None:
                raise ComposerError("the gateway's container was not created: `docker ps -a`")
            _ready(new, configure)
            finished = cut = 0
        published = wait_published(new, stack, PORT_BACK_TIMEOUT)  # once it answers there
        gap = watch.stop(wait_served=SERVED_WAIT_S if published.answers else 0.0)
    if not published.answers:
        raise ComposerError(
            f"the new gateway does not answer through {published.url}: {published.detail} ({gap.line()})"
        )
    return Replacement(new, published, gap, hand_over, finished, cut)


UP = ["up", "--detach", "--no-build", "--pull", "never"]
CUT_AT_STOP = re.compile(r"Cancel (\d+) running task")  # uvicorn's line at its graceful timeout


def retire_extra_gateways(client: docker.DockerClient, extra: tuple[str, ...], say: Say) -> int:
    """Undo a replacement killed half-way: stop and remove the `extra` gateways the snapshot names
    by id (not the one under the gateway's own name). Returns how many."""
    from docker.errors import NotFound

    for container_id in extra:
        try:
            container = client.containers.get(container_id)
        except NotFound:
            continue
        say(f"a gateway replacement was interrupted: removing the extra gateway container {container.name}")
        container.stop(timeout=5)
        container.remove(force=True)
    return len(extra)


def _ready(gateway: Container, configure: Callable[[Container], object] | None) -> None:
    """Wait for the new gateway's control channel (then its port listens), and configure it."""
    step = configure or (lambda c: GatewayControl(c).state())
    retry.port_back(PORT_BACK_TIMEOUT, (GatewayControlError,))(lambda: step(gateway))


def _retire(olds: list[Container], say: Say) -> tuple[int, int]:
    """Stop the old gateways: each closes its listener and finishes its requests. Returns
    (finished, cut), cut as its own log says it cancelled at its drain timeout."""
    finished = cut = 0
    for old in olds:
        try:
            state = GatewayControl(old).state()
            busy = state.inflight + state.held
        except GatewayControlError:
            busy = 0
        drain = float(container_env(old).get("GATEWAY_DRAIN_TIMEOUT") or 60)
        say(f"stopping the old gateway ({busy} request(s) to finish, for up to {drain:.0f}s)")
        old.stop(timeout=int(drain) + 5)
        with contextlib.suppress(Exception):
            lost = sum(int(n) for n in CUT_AT_STOP.findall(old.logs(tail=200).decode(errors="replace")))
            cut += lost
            finished += max(0, busy - lost)
        old.remove(force=True)
    return finished, cut


def _started(container: Container) -> datetime:
    """When the container last started (Docker's RFC 3339 time, nanoseconds cut to microseconds)."""
    raw = str((container.attrs.get("State") or {}).get("StartedAt") or "")
    day, _, rest = raw.partition("T")
    clock, _, fraction = rest.rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(f"{day}T{clock}.{(fraction + '000000')[:6]}+00:00")
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def port_fault(stack: Stack, client: docker.DockerClient, gateway: Container | None = None) -> str | None:
    """What keeps the port holder and the gateway from serving the port together: the holder
    stopped, or restarted after the gateway joined its network (which Docker then took down);
    None when both run together, or there is no holder (compose starts what is missing).
    `gateway`: the running gateway, already read: its holder is inspected through its network
    (no listing of the project's containers)."""
    holder = network_owner(gateway) if gateway is not None else None
    if holder is None or holder.id == gateway.id:  # none given, or its holder is gone: look
        holder, gateways = port_holder(stack, client), None
    else:
        gateways = [gateway]
    if holder is None:
        return None
    if holder.status != "running":
        code = (holder.attrs.get("State") or {}).get("ExitCode")
        return f"its port holder {holder.name} is {holder.status} (exit code {code})"
    since = _started(holder)
    for found in gateways if gateways is not None else gateway_containers(stack, client):
        if found.status == "running" and network_owner(found).id == holder.id and _started(found) < since:
            return (
                f"its port holder {holder.name} restarted after the gateway {found.name} joined its "
                "network, which is gone"
            )
    return None


def repair_port(
    stack: Stack, client: docker.DockerClient, say: Say, gateway: Container | None = None
) -> str | None:
    """Mend the port holder and the gateway in place (see above) when `port_fault` finds them
    apart; the line saying what was done, None when nothing was wrong. Raises ComposerError
    when Docker refuses, or the port does not answer after it. `gateway`: the gateway as a
    snapshot read it (else it is looked up by name)."""
    gateway = gateway if gateway is not None else _named_gateway(stack, client)
    running = gateway if gateway is not None and gateway.status == "running" else None
    fault = port_fault(stack, client, running)
    if fault is None:
        _settle(stack, client, gateway)
        return None
    began = time.monotonic()
    say(f"the published port is dead: {fault}; starting them again")
    holder = port_holder(stack, client)
    if holder is not None and holder.status != "running":
        _start(holder, lambda c: c.start())
    holder = port_holder(stack, client)
    gateways = [
        g for g in gateway_containers(stack, client) if holder is None or network_owner(g).id == holder.id
    ]
    for found in gateways[:1]:  # one serves; a second is an interrupted replacement, retired elsewhere
        _start(found, lambda c: c.restart(timeout=0), stack)  # nothing reaches it where it is
    return (
        f"the published port was dead ({fault}): started again, it answers ({time.monotonic() - began:.1f}s)"
    )


def _named_gateway(stack: Stack, client: docker.DockerClient) -> Container | None:
    """The gateway under its own name (one inspection), or the first one a listing finds."""
    from docker.errors import NotFound

    try:
        return client.containers.get(f"{stack.project}-{SERVICE}-1")
    except NotFound:
        return gateway_container(stack, client)


JUST_STARTED_S = 30.0
"""A gateway that (re)started this recently may not listen yet: `up` waits for it to answer,
at most SETTLE_S (then the preflight's probe judges the port)."""
SETTLE_S = 15.0


def _settle(stack: Stack, client: docker.DockerClient, gateway: Container | None) -> None:
    """Wait (at most SETTLE_S) for a gateway that Docker is restarting or just started
    (its own exit after its holder restarted) to answer through the port, so that `up` does not
    take it for a dead port."""
    if gateway is None or gateway.status not in {"running", "restarting"}:
        return
    age = (datetime.now(UTC) - _started(gateway)).total_seconds()
    if gateway.status == "restarting" or age < JUST_STARTED_S:
        wait_published(gateway, stack, SETTLE_S)


def running_gateway(stack: Stack, client: docker.DockerClient, say: Say) -> Container | None:
    """The stack's gateway container for a control call, started again first when it or its port
    holder stopped (`repair_port`); None when there is none."""
    repair_port(stack, client, say)
    gateway = gateway_container(stack, client)
    if gateway is not None and gateway.status != "running":
        say(f"the gateway {gateway.name} is {gateway.status}: starting it again")
        try:
            _start(gateway, lambda c: c.start(), stack)
        except ComposerError:
            # its holder may have stopped since `repair_port` looked (killed with it): mend both
            if repair_port(stack, client, say) is None:
                raise
    return gateway


def _start(container: Container, how: Callable[[Container], object], stack: Stack | None = None) -> None:
    """Start (or restart) `container` with `how`; with `stack`, until the port answers through it."""
    from docker.errors import APIError

    try:
        how(container)
    except APIError as err:
        if not _runs_soon(container):  # else Docker's restart policy (or the gateway's exit) won the race
            raise ComposerError(
                f"Docker did not start {container.name}: {err.explanation or err}; "
                "`compose-spec up --recreate-gateway` recreates the gateway and its port holder"
            ) from err
    if stack is not None:
        published = wait_published(container, stack, PORT_BACK_TIMEOUT)
        if not published.answers:
            raise ComposerError(
                f"the published port does not answer after {container.name} started again "
                f"({published.detail}): `compose-spec up --recreate-gateway`"
            )


RESTARTING_S = 5.0
"""Seconds a container Docker refused to start may take to run all the same (its restart
policy, or the gateway's own exit, started it meanwhile)."""


def _runs_soon(container: Container) -> bool:
    """Whether `container` runs within RESTARTING_S (Docker restarting it on its own)."""
    from docker.errors import NotFound

    def attempt() -> bool:
        try:
            container.reload()
        except NotFound:
            return False
        if container.status != "running":
            raise Pending(f"{container.name} is {container.status}", result=False)
        return True

    return bool(retry.port_answers(RESTARTING_S)(attempt))  # the last look's answer at the deadline
