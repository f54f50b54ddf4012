"""What runs, read from Docker labels: the variant container of a compose project."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from composer import labels as label_names
from composer.engine.variant_container import VariantContainer
from composer.render.spec import CONTAINER_PORT, SLEEP_MODE_FLAG
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container


@dataclass(frozen=True)
class RunningVariant:
    """A variant container as Docker reports it."""

    container_id: str
    name: str
    variant: str
    config_hash: str
    image: str
    status: str
    docker_health: str | None
    started_at: datetime | None
    port: int | None
    served_name: str
    config_file: str | None
    restart_count: int
    exit_code: int | None = None
    finished_at: datetime | None = None
    service: str | None = None  # the compose service that created it (None: launcher)
    sleep_mode: bool = False  # started with --enable-sleep-mode: it can be put to sleep
    restart_policy: str = ""  # Docker's restart policy now (`no` while it is parked asleep)

    @property
    def running(self) -> bool:
        return self.status == "running"

    def uptime_seconds(self, now: datetime | None = None) -> float | None:
        """Seconds since the container started, when running."""
        if not self.running or self.started_at is None:
            return None
        return ((now or datetime.now(UTC)) - self.started_at).total_seconds()


def _started_at(raw: str | None) -> datetime | None:
    if not raw or raw.startswith("0001-"):
        return None
    trimmed = raw.rstrip("Z").split(".")[0]
    return datetime.fromisoformat(trimmed).replace(tzinfo=UTC)


def describe(container: Container) -> RunningVariant:
    """A RunningVariant from a container's attributes."""
    attrs = container.attrs
    labels = attrs.get("Config", {}).get("Labels") or {}
    state = attrs.get("State", {})
    port = labels.get(label_names.PORT)
    files = labels.get(label_names.COMPOSE_CONFIG_FILES)
    return RunningVariant(
        container_id=container.id or "",
        name=container.name or "",
        variant=labels.get(label_names.VARIANT, "?"),
        config_hash=labels.get(label_names.CONFIG_HASH, ""),
        image=attrs.get("Config", {}).get("Image", ""),
        status=state.get("Status", "unknown"),
        docker_health=(state.get("Health") or {}).get("Status"),
        started_at=_started_at(state.get("StartedAt")),
        port=int(port) if port and port.isdigit() else None,
        served_name=labels.get(label_names.SERVED_NAME, ""),
        config_file=files.split(",")[0] if files else None,
        restart_count=int(attrs.get("RestartCount", 0) or 0),
        exit_code=state.get("ExitCode") if isinstance(state.get("ExitCode"), int) else None,
        finished_at=_started_at(state.get("FinishedAt")),
        service=labels.get(label_names.COMPOSE_SERVICE),
        sleep_mode=SLEEP_MODE_FLAG in _argv(attrs),
        restart_policy=str(((attrs.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or ""),
    )


def _argv(attrs: dict) -> list[str]:
    """The container's command line (entrypoint arguments and command) as Docker stores it."""
    config = attrs.get("Config") or {}
    return [str(word) for word in (config.get("Entrypoint") or []) + (config.get("Cmd") or [])]


def our_containers(stack: Stack, client: docker.DockerClient) -> list[VariantContainer]:
    """Variant containers of this stack's project (compose or launcher started), newest first."""
    summaries = client.api.containers(all=True, filters={"label": [label_names.VARIANT]})
    return _ours(stack, client, summaries)


def project_containers(
    stack: Stack, client: docker.DockerClient
) -> tuple[list[VariantContainer], Container | None]:
    """The project's variant containers (newest first) and its gateway, from ONE listing."""
    from docker.errors import NotFound

    summaries = client.api.containers(all=True)
    variants = [s for s in summaries if label_names.VARIANT in (s.get("Labels") or {})]
    gateways = [
        s
        for s in summaries
        if (s.get("Labels") or {}).get(label_names.COMPOSE_PROJECT) == stack.project
        and (s.get("Labels") or {}).get(label_names.ROLE) == label_names.ROLE_GATEWAY
    ]
    gateway = None
    for summary in gateways[:1]:
        try:
            gateway = client.containers.get(summary["Id"])
        except NotFound:  # removed between the listing and the inspection
            gateway = None
    return _ours(stack, client, variants), gateway


def _ours(stack: Stack, client: docker.DockerClient, summaries: list[dict]) -> list[VariantContainer]:
    from docker.errors import NotFound

    found: list[Container] = []
    for summary in summaries:
        labels = summary.get("Labels") or {}
        project = labels.get(label_names.COMPOSE_PROJECT)
        if project is not None and project != stack.project:
            continue  # another project's: not inspected
        try:
            found.append(client.containers.get(summary["Id"]))
        except NotFound:  # removed between the listing and the inspection
            continue
    launcher_name = f"{stack.project}-{stack.service}-1"
    ours = [
        c
        for c in found
        if (
            c.labels.get(label_names.COMPOSE_PROJECT) == stack.project
            and c.labels.get(label_names.COMPOSE_SERVICE)
            in {stack.service, f"{stack.service}-{c.labels.get(label_names.VARIANT)}"}
        )
        or (label_names.COMPOSE_PROJECT not in c.labels and c.name == launcher_name)
    ]
    ours.sort(key=lambda c: c.attrs.get("Created", ""), reverse=True)
    return [VariantContainer(c) for c in ours]


def gateway_upstream(stack: Stack, client: docker.DockerClient) -> str | None:
    """Where the stack's gateway forwards now (None: no gateway, or it does not answer)."""
    from composer.errors import GatewayControlError
    from composer.gateway.client import GatewayControl

    gateway = gateway_container(stack, client)
    if gateway is None or gateway.status != "running":
        return None
    try:
        return GatewayControl(gateway).state().upstream
    except GatewayControlError:  # Docker or the gateway gone: nothing routed that we know of
        return None


def upstream_url(container_name: str) -> str:
    """The gateway's upstream URL for a variant container, by its own name."""
    return f"http://{container_name}:{CONTAINER_PORT}"


def is_asleep(container: VariantContainer, stack: Stack, upstream: str | None) -> bool:
    """A running sleep-standby container (service `<service>-<variant>`) the gateway does not
    route to: `up` put it to sleep. The gateway's route is the only record of which one
    serves: Docker's and the gateway's view, no state file."""
    service = container.container.labels.get(label_names.COMPOSE_SERVICE)
    if service in (None, stack.service) or container.status != "running":
        return False
    return upstream != upstream_url(container.name)


def serving_containers(stack: Stack, client: docker.DockerClient) -> list[VariantContainer]:
    """The project's variant containers but the sleeping ones, newest first."""
    ours = our_containers(stack, client)
    upstream = gateway_upstream(stack, client) if any(has_standby_service(c, stack) for c in ours) else None
    return [c for c in ours if not is_asleep(c, stack, upstream)]


def sleeping_containers(stack: Stack, client: docker.DockerClient) -> list[VariantContainer]:
    """The project's sleeping variant containers, newest first."""
    ours = our_containers(stack, client)
    upstream = gateway_upstream(stack, client) if any(has_standby_service(c, stack) for c in ours) else None
    return [c for c in ours if is_asleep(c, stack, upstream)]


def has_standby_service(container: VariantContainer, stack: Stack) -> bool:
    """A container of a sleep-standby service (`<service>-<variant>`)."""
    return container.container.labels.get(label_names.COMPOSE_SERVICE) not in (None, stack.service)


def gateway_container(stack: Stack, client: docker.DockerClient) -> Container | None:
    """The stack's gateway container (running or not), if compose created one."""
    found = client.containers.list(
        all=True,
        filters={
            "label": [
                f"{label_names.COMPOSE_PROJECT}={stack.project}",
                f"{label_names.ROLE}={label_names.ROLE_GATEWAY}",
            ]
        },
    )
    return found[0] if found else None


def current_variant(stack: Stack, client: docker.DockerClient) -> RunningVariant | None:
    """The running variant container of the stack that serves (not asleep), if any."""
    for container in serving_containers(stack, client):
        described = container.describe()
        if described.running:
            return described
    return None
