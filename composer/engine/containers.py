"""What runs, read from Docker labels: the variant container of a compose project."""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer import labels as label_names
from composer.engine.variant_container import RunningVariant, VariantContainer
from composer.render.spec import CONTAINER_PORT
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container


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
