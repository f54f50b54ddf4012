"""Checks for an engine on another machine (a Docker context or DOCKER_HOST over ssh:// or
tcp://): bind mounts resolve on its host, and ports are published there (its loopback cannot
be reached from here). On a local engine they defer to `preflight`'s plain checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from composer import labels
from composer.doctor.preflight import (
    UNKNOWN,
    Finding,
    VariantFacts,
    check_mounts,
    check_port,
    check_published_port,
)
from composer.engine.client import Endpoint
from composer.engine.health import base_url
from composer.render.spec import resolve
from composer.stack.model import Stack

if TYPE_CHECKING:
    from collections.abc import Sequence

    import docker

PROBE_TARGET = "/probe"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def check_endpoint(endpoint: Endpoint | None) -> Finding | None:
    """Which engine doctor and the swaps talk to, and whether it is on another machine."""
    if endpoint is None:
        return None
    where = f"remote: host paths and ports are on {endpoint.address}" if endpoint.remote else "this machine"
    return Finding("docker-endpoint", "ok", f"engine: {endpoint.describe()} ({where})")


def check_client_address(stack: Stack, endpoint: Endpoint | None) -> Finding | None:
    """The URL clients use, and a failure when the port would sit on a remote loopback."""
    if endpoint is None:
        return None
    url = base_url(stack.bind_address, stack.port)
    if endpoint.remote and (stack.bind_address in LOOPBACK or stack.bind_address.startswith("127.")):
        return Finding(
            "client-address",
            "fail",
            f"port {stack.port} is published on {endpoint.address}'s loopback ({stack.bind_address}): "
            "neither clients nor the health gate on this machine can reach it",
            f"set VLLM_BIND_ADDRESS to an address of {endpoint.address} reachable from here (e.g. 0.0.0.0 "
            f"behind a firewall), or run compose-spec on that host",
        )
    return Finding("client-address", "ok", f"clients use {url}")


def port_check(
    stack: Stack,
    client: docker.DockerClient | None,
    endpoint: Endpoint | None,
    known: Sequence[Any] | None = None,
) -> Finding:
    """A running gateway probed end to end, then the containers publishing the port on a
    remote engine's host, or the local bind test; `known`: see `preflight.check_port`."""
    gateway = UNKNOWN
    if known is not None:
        gateway = next((c for c in known if c.labels.get(labels.ROLE) == labels.ROLE_GATEWAY), None)
    published = check_published_port(stack, client, gateway)
    if published is not None:
        return published
    if endpoint is None or not endpoint.remote or client is None:
        return check_port(stack, client, known)
    holders = [
        c
        for c in client.containers.list()
        if any(
            str(stack.port) == binding.get("HostPort")
            for bindings in (c.attrs.get("NetworkSettings", {}).get("Ports") or {}).values()
            for binding in bindings or []
        )
    ]
    theirs = [c for c in holders if labels.VARIANT not in c.labels and labels.ROLE not in c.labels]
    if theirs:
        return Finding(
            "port",
            "fail",
            f"port {stack.port} on {endpoint.address} is published by container {theirs[0].name}, not ours",
            "stop that container or choose another port (VLLM_PORT)",
        )
    if holders:
        return Finding(
            "port", "ok", f"port {stack.port} on {endpoint.address} is held by our variant container"
        )
    return Finding(
        "port",
        "ok",
        f"no container on {endpoint.address} publishes port {stack.port} "
        "(a process outside Docker there cannot be seen from here)",
    )


def mount_checks(
    variant: VariantFacts, client: docker.DockerClient | None, endpoint: Endpoint | None
) -> list[Finding]:
    """Every mounted host directory exists where the engine runs."""
    if endpoint is None or not endpoint.remote:
        return check_mounts(variant.mounts)
    if client is None:
        return [
            Finding("mounts", "warn", "cannot check host paths on the remote engine: it is not reachable")
        ]
    return check_mounts_on_engine(variant, client, endpoint.address or endpoint.host)


def check_mounts_on_engine(variant: VariantFacts, client: docker.DockerClient, where: str) -> list[Finding]:
    """Create (never start) a container of the variant's image with each host path bind-mounted
    read-only: the engine refuses a bind source that does not exist on its host, where a plain
    `-v` would have created an empty directory instead."""
    from docker.errors import APIError, ImageNotFound
    from docker.types import Mount

    image = variant.image
    try:
        client.images.get(image)
    except ImageNotFound:
        return [
            Finding(
                "mounts",
                "warn",
                f"cannot check host paths on {where}: image {image} is not on that engine",
                f"load it there first (docker save {image} | docker --context NAME load)",
            )
        ]
    findings = []
    for mount in variant.mounts:
        source = resolve(mount.source)
        try:
            probe = client.containers.create(
                image,
                command=["true"],
                mounts=[Mount(PROBE_TARGET, source, type="bind", read_only=True)],
                labels={labels.DOCTOR_PROBE: "mounts"},
                network_disabled=True,
            )
        except APIError as err:
            explanation = str(err.explanation or err)
            missing = "does not exist" in explanation or "no such file" in explanation.lower()
            problem = (
                f"does not exist on {where}" if missing else f"cannot be mounted on {where}: {explanation}"
            )
            detail = f"model directory {source} (mounted at {mount.target}) {problem}"
            fix = f"create it on {where} or set {mount.setting} to a directory that exists there"
            findings.append(Finding("mounts", "fail", detail, fix))
            continue
        probe.remove(force=True)
        findings.append(Finding("mounts", "ok", f"{source} exists on {where}"))
    return findings
