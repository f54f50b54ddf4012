"""One read of what runs for a project: its containers, the gateway, the running swap.

`take()` lists Docker's containers once and, where it matters, asks in ONE `docker exec` in
the gateway for its state and each running sleep-mode container's `/is_sleeping` (one the
gateway cannot ask is asked itself). Every command reads the `Snapshot`, never Docker again:
it is the one definition of who serves and who sleeps (live containers, label `live`, are in
`live`, by member name).

In order of trust: asleep is the container's own `/is_sleeping` answer, never inferred from
routing; serving is the gateway's route, else (no gateway answer) the restart policy (a
container put to sleep has `no`); a running container neither serving nor asleep is
`awake`, and the next `up` stops it or puts it to sleep.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from composer import labels as label_names
from composer.engine.containers import RunningVariant, project_containers, upstream_url
from composer.errors import GatewayControlError
from composer.gateway.host.client import GatewayControl
from composer.stack.placement import members_of
from composer.swap.journal import RunningSwap, running_swap
from composer.swap.ops import Member as PlanMember

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from composer.engine.variant_container import VariantContainer
    from composer.gateway.host.client import GatewayState
    from composer.render.spec import Owner
    from composer.stack.model import Stack

PARKED_POLICY = "no"  # the restart policy of a container put to sleep


@dataclass(frozen=True)
class Member:
    """One variant container as the snapshot sees it."""

    container: VariantContainer
    info: RunningVariant
    standby_service: bool  # a `<service>-<variant>` service (sleep standby), not the shared one
    sleeping: bool | None  # its own /is_sleeping answer; None when not asked or no answer
    serving: bool = False
    asleep: bool = False

    @property
    def variant(self) -> str:
        return self.info.variant

    @property
    def running(self) -> bool:
        return self.info.running

    @property
    def state(self) -> str:
        """serving, asleep, awake (running, not serving), or Docker's status."""
        if self.serving:
            return "serving"
        if self.asleep:
            return "asleep"
        return "awake" if self.running else self.info.status


@dataclass(frozen=True)
class LiveRunning:
    """A live container as Docker reports it (labels `live` and `gpus`)."""

    name: str  # the member: `mtp/1`
    variant: str
    container: str
    gpus: str
    config_hash: str
    status: str
    service: str
    owner: Owner | None = None  # the stack that started it, from its labels
    run_file: str = ""  # the compose file that created it (it starts again from there)

    @classmethod
    def of(cls, name: str, info: RunningVariant, gpus: str) -> LiveRunning:
        run = (info.config_hash, info.status, info.service or "", info.owner, info.config_file or "")
        return cls(name, info.variant, info.name, gpus, *run)

    def member(self, speculative: bool = False) -> PlanMember:
        """The plan's view of it: what the executor needs to drain, stop or start it again."""
        fields = (self.name, self.variant, self.container, self.service, self.run_file, self.gpus)
        return PlanMember(*fields, speculative)


@dataclass(frozen=True)
class Snapshot:
    """What runs for one project, read once."""

    project: str
    members: tuple[Member, ...]  # newest first
    gateway: Container | None = None
    gateway_state: GatewayState | None = None
    gateway_error: str | None = None
    swap: RunningSwap | None = None
    route: str | None = None  # where the gateway forwards now (None: no gateway, or no answer)
    extra_gateways: tuple[str, ...] = ()  # more running gateways (an interrupted replacement's)
    live: tuple[LiveRunning, ...] = ()  # the live set's containers (any state), by member name

    @property
    def live_running(self) -> list[LiveRunning]:
        return [r for r in self.live if r.status == "running"]

    @property
    def serving(self) -> Member | None:
        return next((m for m in self.members if m.serving), None)

    @property
    def current(self) -> RunningVariant | None:
        """The serving variant's description."""
        serving = self.serving
        return serving.info if serving else None

    @property
    def asleep(self) -> list[Member]:
        return [m for m in self.members if m.asleep]

    @property
    def awake_idle(self) -> list[Member]:
        """Running containers that neither serve nor sleep."""
        return [m for m in self.members if m.running and not m.serving and not m.asleep]

    @property
    def route_ok(self) -> bool | None:
        """Whether the gateway forwards to the serving container (None: unknown or nothing serves)."""
        serving = self.serving
        if self.route is None or serving is None:
            return None
        if serving.standby_service:
            return self.route == upstream_url(serving.info.name)
        return self.route not in {upstream_url(m.info.name) for m in self.members if m.standby_service}

    @property
    def gateway_running(self) -> bool:
        return self.gateway is not None and self.gateway.status == "running"


def _standby_service(info: RunningVariant, stack: Stack) -> bool:
    return info.service is not None and info.service != stack.service


def take(
    stack: Stack, client: docker.DockerClient, *, gateway_state: bool = False, ask_sleeping: bool = True
) -> Snapshot:
    """Read the project's containers, gateway and running swap once; the gateway is asked
    (one exec) when a sleep-mode container or a live set runs, or with `gateway_state`."""
    variants, gateway, extra = project_containers(stack, client)
    every = [(c, c.describe()) for c in variants]
    labelled = any(label_names.LIVE in c.container.labels for c, _ in every)
    found = [(c, info) for c, info in every if label_names.LIVE not in c.container.labels]
    gateway = gateway if stack.gateway.enabled else None
    sleep_mode = [
        info for _, info in found if info.running and (info.sleep_mode or _standby_service(info, stack))
    ]
    state: GatewayState | None = None
    error: str | None = None
    answers: dict[str, bool | None] = {}
    if gateway is not None and gateway.status == "running" and (sleep_mode or gateway_state or labelled):
        urls = [upstream_url(info.name) for info in sleep_mode] if ask_sleeping else []
        try:
            state, answers = GatewayControl(gateway).look(urls)
        except GatewayControlError as err:
            error = str(err)
    if ask_sleeping:
        for container, info in found:
            url = upstream_url(info.name)
            if info in sleep_mode and answers.get(url) is None:
                answers[url] = container.is_sleeping()
    waking = state is not None and bool(state.raw.get("waking", False))
    routed = state.live_set if state is not None else None
    live = live_members(stack, every, routed)
    members = classify(stack, found, state.upstream if state else None, answers, waking)
    if routed:  # the gateway routes among a live set: a container outside it serves nothing
        adopted = {r.container for r in live}
        members = tuple(replace(m, serving=False) if m.info.name not in adopted else m for m in members)
    return Snapshot(
        project=stack.project,
        members=members,
        gateway=gateway,
        gateway_state=state,
        gateway_error=error,
        swap=running_swap(stack.project),
        route=state.upstream if state else None,
        extra_gateways=extra if gateway is not None else (),
        live=live,
    )


def live_members(
    stack: Stack,
    found: list[tuple[VariantContainer, RunningVariant]],
    routed: Collection[str] | None = None,
) -> tuple[LiveRunning, ...]:
    """The live set's containers, by member name (pure); while members exist, the one serving
    container of `stack.service` is one too, `<variant>/1` (it joined as it ran), unless the
    gateway's set (`routed`: its member names; None: the gateway did not say) leaves it out:
    a container a failed change left behind is no member."""
    members = {
        c.container.labels[label_names.LIVE]: (info, c.container.labels.get(label_names.GPUS, "-"))
        for c, info in found
        if label_names.LIVE in c.container.labels
    }
    for _, info in found if members else ():
        if routed is not None and f"{info.variant}/1" not in routed:
            continue
        if info.running and info.service == stack.service and f"{info.variant}/1" not in members:
            variant = stack.variants.get(info.variant)
            member = next(iter(members_of(variant)), None) if variant is not None else None
            members[f"{info.variant}/1"] = (info, member.gpus_text if member else "-")
    return tuple(LiveRunning.of(name, info, gpus) for name, (info, gpus) in sorted(members.items()))


def classify(
    stack: Stack,
    found: list[tuple[VariantContainer, RunningVariant]],
    route: str | None,
    answers: dict[str, bool | None],
    waking: bool = False,
) -> tuple[Member, ...]:
    """Decide serving/asleep for each container (pure; see the module's docstring); a sleeper
    the gateway routes to serves only while the gateway wakes it (`waking`)."""
    names = {upstream_url(info.name) for _, info in found if info.running}
    routed_to_one = route is not None and route in names
    members: list[Member] = []
    serving_taken = False
    for container, info in found:
        standby = _standby_service(info, stack)
        sleeping = answers.get(upstream_url(info.name))
        serving = asleep = False
        if info.running:
            if standby and sleeping is True and not (waking and route == upstream_url(info.name)):
                asleep = True  # its own answer, even where the gateway routes to it
            elif routed_to_one:
                serving = route == upstream_url(info.name)
                asleep = not serving and standby and sleeping is not False
            elif standby:
                parked = info.restart_policy == PARKED_POLICY
                asleep = sleeping is True or (sleeping is None and parked)
                serving = not asleep and not parked
            else:
                serving = True
            serving = serving and not serving_taken  # two candidates: the newest serves, the other is awake
            serving_taken = serving_taken or serving
        members.append(Member(container, info, standby, sleeping, serving, asleep))
    return tuple(members)
