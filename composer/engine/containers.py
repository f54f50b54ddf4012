"""What runs, read from Docker labels: the variant container of a compose project."""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer import labels as label_names
from composer.engine.variant_container import RunningVariant as RunningVariant
from composer.engine.variant_container import VariantContainer
from composer.render.spec import CONTAINER_PORT
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container


def our_containers(stack: Stack, client: docker.DockerClient) -> list[VariantContainer]:
    """Variant containers of this stack's project (compose or launcher started, not live), newest first."""
    summaries = client.api.containers(all=True, filters={"label": [label_names.VARIANT]})
    return [c for c in _ours(stack, client, summaries) if label_names.LIVE not in c.container.labels]


def project_containers(
    stack: Stack, client: docker.DockerClient
) -> tuple[list[VariantContainer], Container | None, tuple[str, ...]]:
    """The project's variant containers, live ones included (newest first), its gateway (a
    running one, under the gateway's own name first) and the other running gateways (their
    ids: a replacement killed half-way leaves two), from ONE listing."""
    summaries = client.api.containers(all=True)
    variants = [s for s in summaries if label_names.VARIANT in (s.get("Labels") or {})]
    own = f"/{stack.project}-gateway-1"
    gateways = sorted(
        (
            s
            for s in summaries
            if (s.get("Labels") or {}).get(label_names.COMPOSE_PROJECT) == stack.project
            and (s.get("Labels") or {}).get(label_names.ROLE) == label_names.ROLE_GATEWAY
        ),
        key=lambda s: (s.get("State") != "running", own not in (s.get("Names") or ())),
    )
    gateway = _inspect(client, gateways[0]["Id"]) if gateways else None
    extra = tuple(s["Id"] for s in gateways[1:] if s.get("State") == "running")
    return _ours(stack, client, variants), gateway, extra


def _inspect(client: docker.DockerClient, container_id: str) -> Container | None:
    """The container, or None when it was removed between the listing and the inspection."""
    from docker.errors import NotFound

    try:
        return client.containers.get(container_id)
    except NotFound:
        return None


def _ours(stack: Stack, client: docker.DockerClient, summaries: list[dict]) -> list[VariantContainer]:
    inspected = (  # another project's are not inspected
        _inspect(client, s["Id"])
        for s in summaries
        if (s.get("Labels") or {}).get(label_names.COMPOSE_PROJECT) in (None, stack.project)
    )
    found = [c for c in inspected if c is not None]
    launcher_name = f"{stack.project}-{stack.service}-1"
    ours = [
        c
        for c in found
        if (
            c.labels.get(label_names.COMPOSE_PROJECT) == stack.project
            and (
                label_names.LIVE in c.labels
                or c.labels.get(label_names.COMPOSE_SERVICE)
                in {stack.service, f"{stack.service}-{c.labels.get(label_names.VARIANT)}"}
            )
        )
        or (label_names.COMPOSE_PROJECT not in c.labels and c.name == launcher_name)
    ]
    ours.sort(key=lambda c: c.attrs.get("Created", ""), reverse=True)
    return [VariantContainer(c) for c in ours]


def upstream_url(container_name: str) -> str:
    """The gateway's upstream URL for a variant container, by its own name."""
    return f"http://{container_name}:{CONTAINER_PORT}"


def gateway_container(stack: Stack, client: docker.DockerClient) -> Container | None:
    """The stack's gateway container (a running one first), if compose created one."""
    return next(iter(gateway_containers(stack, client)), None)


def gateway_containers(
    stack: Stack, client: docker.DockerClient, role: str = label_names.ROLE_GATEWAY
) -> list[Container]:
    """The stack's gateway containers (two while one replaces the other), running ones first;
    `role`: `ROLE_GATEWAY_PORT` for the port holder."""
    found = client.containers.list(
        all=True,
        filters={"label": [f"{label_names.COMPOSE_PROJECT}={stack.project}", f"{label_names.ROLE}={role}"]},
    )
    return sorted(found, key=lambda c: c.status != "running")


def port_holder(stack: Stack, client: docker.DockerClient) -> Container | None:
    """The container that publishes the stack's port and whose network the gateway joins."""
    return next(iter(gateway_containers(stack, client, label_names.ROLE_GATEWAY_PORT)), None)


def holds_the_port(holder: Container | None, stack: Stack) -> bool:
    """The port holder runs and publishes the stack's port on the stack's address."""
    if holder is None or holder.status != "running":
        return False
    bindings = (holder.attrs.get("HostConfig") or {}).get("PortBindings") or {}
    binding = (bindings.get(f"{CONTAINER_PORT}/tcp") or [{}])[0] or {}
    host = binding.get("HostIp") or ""
    return str(binding.get("HostPort")) == str(stack.port) and host == stack.bind_address


def holder_kept(stack: Stack, client: docker.DockerClient) -> list[str]:
    """`--no-deps` for compose while the port holder runs with the stack's port: compose then
    leaves it (and the port) alone when the gateway's image, which it shares, changed."""
    return ["--no-deps"] if holds_the_port(port_holder(stack, client), stack) else []


def network_owner(container: Container) -> Container:
    """The container whose network `container` uses: the port holder for a gateway that joins
    it (`network_mode: service:...`), else the container itself (it publishes its own ports)."""
    from docker.errors import DockerException

    mode = str((container.attrs.get("HostConfig") or {}).get("NetworkMode") or "")
    if mode.startswith("container:"):
        try:
            return container.client.containers.get(mode.split(":", 1)[1])
        except DockerException:
            return container
    return container


def port_bindings(container: Container) -> dict[str, list[dict[str, str]]]:
    """The host ports Docker publishes for the network `container` uses (see `network_owner`)."""
    owner = network_owner(container)
    return (owner.attrs.get("HostConfig") or {}).get("PortBindings") or {}
