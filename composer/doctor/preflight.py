"""The checks doctor and the swap's preflight share, the finding they give, and what a
variant's checks read (`VariantFacts`). Nothing is changed when one fails."""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer import labels
from composer.engine import fixes
from composer.stack.model import Stack

if TYPE_CHECKING:
    from collections.abc import Sequence

    import docker
    from docker.models.containers import Container

    from composer.render.spec import Mount
    from composer.stack.model import Speculative

# "not read yet": the check reads Docker itself (None would say "there is none")
UNKNOWN: Any = object()
STATUSES = ("ok", "warn", "fail")  # a finding's status, from the best to the worst


@dataclass(frozen=True)
class Finding:
    """One check's outcome: `ok`, `warn` or `fail`, what was seen, the fix, and the variant it
    is about (None for stack-wide checks)."""

    name: str
    status: str
    detail: str
    fix: str = ""
    variant: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "fail"


@dataclass(frozen=True)
class VariantFacts:
    """One variant as its checks read it, resolved once from its Target (never its `Variant`)."""

    table: str  # the stack table its settings live in, `variants.mtp` (fixes name it)
    image: str  # the image reference it runs, resolved
    mounts: tuple[Mount, ...]  # the host directories its container mounts
    environment: dict[str, str]  # its container's environment, as rendered
    speculative: Speculative | None  # its speculative decoding settings (None: plain decode)
    dropped_args: tuple[tuple[str, str], ...] = ()  # inherited flags it runs without, and where from
    refused: str = ""  # why vLLM refuses it with a stack-wide setting (empty: it can start)


def check_api_key(stack: Stack, allow_weak: bool = False) -> Finding:
    """The API key is set, header-safe and hard to guess (an estimated entropy of at least
    64 bits, see `composer.stack.keys`); a weak key fails unless `allow_weak` (then warns)."""
    from composer.stack.keys import ALLOW_HELP, GENERATE_HELP, MIN_KEY_BITS, estimate_key
    from composer.stack.values import API_KEY_HELP, is_header_safe

    key = stack.api_key
    if not key:
        return Finding("api-key", "fail", "VLLM_API_KEY is not set", "set VLLM_API_KEY in .env")
    if not is_header_safe(key):
        return Finding(
            "api-key", "fail", "VLLM_API_KEY cannot be sent in an HTTP header", f"use {API_KEY_HELP}"
        )
    strength = estimate_key(key)
    if strength.weak:
        return Finding(
            "api-key",
            "warn" if allow_weak else "fail",
            f"VLLM_API_KEY is too easy to guess: its estimated entropy is {strength.describe()}, "
            f"at least {MIN_KEY_BITS} bits are required",
            f"generate one: {GENERATE_HELP}" + ("" if allow_weak else f" (or pass {ALLOW_HELP})"),
        )
    return Finding("api-key", "ok", "VLLM_API_KEY is set")


def _inspect(client: docker.DockerClient, image: str) -> tuple[Any, str]:
    """The local image (None when absent) and, when the engine cannot inspect it, why."""
    from docker.errors import APIError, ImageNotFound

    try:
        return client.images.get(image), ""
    except ImageNotFound:
        return None, ""
    except APIError as err:
        return None, str(err.explanation or err)


def check_image(client: docker.DockerClient, image: str) -> Finding:
    """The image is present locally (never pulled)."""
    found, error = _inspect(client, image)
    if error:
        return Finding("image", "fail", f"image {image}: {error}", "check the reference")
    if found is None:
        return Finding(
            "image",
            "fail",
            f"image {image} is not present locally (images are never pulled)",
            f"build or load it first ({fixes.build_image(image)}; "
            f"an overlay image: {fixes.build_overlay('RECIPE')})",
        )
    return Finding("image", "ok", f"image {image} is present ({found.short_id})")


def check_mounts(mounts: Sequence[Mount]) -> list[Finding]:
    """Every host directory of `mounts` (a variant's) exists."""
    from composer.render.spec import resolve

    sources = [(mount, resolve(mount.source)) for mount in mounts]
    return [
        Finding("mounts", "ok", f"{source} exists")
        if Path(source).is_dir()
        else Finding(
            "mounts",
            "fail",
            f"model directory {source} (mounted at {mount.target}) does not exist",
            f"set {mount.setting} to the checkpoint directory",
        )
        for mount, source in sources
    ]


class AddressNotHere(OSError):
    """The bind address is not an address of this host."""


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (we can bind it ourselves); AddressNotHere when
    `host` is not an address of this machine."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise AddressNotHere(err.errno, err.strerror) from err
    return True


def _holders(
    stack: Stack, client: docker.DockerClient, known: Sequence[Any] | None = None
) -> tuple[list, list]:
    """Running variant or gateway containers labelled with the stack's port: ours, and other
    projects'. Docker is listed only when none of `known` (the swap's snapshot) holds it."""

    def held(c: Any) -> bool:  # a variant or a gateway, labelled with the stack's port
        kind = labels.VARIANT in c.labels or labels.ROLE in c.labels
        return kind and c.labels.get(labels.PORT) == str(stack.port)

    running = [c for c in known or () if c.status == "running" and held(c)]
    if running:
        return running, []
    labelled = client.containers.list(filters={"label": [f"{labels.PORT}={stack.port}"]})
    labelled = [c for c in labelled if held(c)]
    launcher = f"{stack.project}-{stack.service}-1"  # a launcher-started container has no compose labels

    def ours(c: Container) -> bool:
        project = c.labels.get(labels.COMPOSE_PROJECT)
        return project == stack.project or (project is None and c.name == launcher)

    return [c for c in labelled if ours(c)], [c for c in labelled if not ours(c)]


def _publishes(container: Any, port: int) -> bool:
    """The container publishes `port` on the host (Docker's port bindings say so)."""
    attrs = getattr(container, "attrs", None) or {}
    bindings = (attrs.get("HostConfig") or {}).get("PortBindings") or {}
    return any(str(b.get("HostPort")) == str(port) for found in bindings.values() for b in found or ())


def check_port(
    stack: Stack, client: docker.DockerClient | None, known: Sequence[Any] | None = None
) -> Finding:
    """The port is free, or held by this project's own container (another project's would make
    our start fail); `known`: see `_holders`."""
    found = partial(Finding, "port")
    host = "0.0.0.0" if stack.bind_address in {"", "*"} else stack.bind_address
    try:
        free = port_is_free(host, stack.port)
    except AddressNotHere as err:
        return found(
            "fail",
            f"cannot bind {host}:{stack.port}: {err.strerror} (bind_address is not an address of this host)",
            "set stack.bind_address (VLLM_BIND_ADDRESS) to an address of this host, e.g. 127.0.0.1",
        )
    if free:
        return found("ok", f"{host}:{stack.port} is free")
    if client is not None:
        ours, others = _holders(stack, client, known)
        if ours:
            holder = ours[0].labels.get(labels.VARIANT) or ours[0].labels.get(labels.ROLE, "?")
            return found("ok", f"port {stack.port} is held by our {holder} container")
        if others:
            other = min(others, key=lambda c: not _publishes(c, stack.port))  # the gateway, usually
            project = other.labels.get(labels.COMPOSE_PROJECT, "none")
            return found(
                "fail",
                f"port {stack.port} on {host} is published by container {other.name} of compose project "
                f"{project!r}, not by this stack's project {stack.project!r}",
                f"stop that project (compose-spec -p {project} down) or choose another port (VLLM_PORT)",
            )
    return found(
        "fail",
        f"port {stack.port} on {host} is in use by a process that is not ours",
        "stop that process or choose another port (VLLM_PORT)",
    )


def check_published_port(
    stack: Stack, client: docker.DockerClient | None, gateway: Any = UNKNOWN
) -> Finding | None:
    """A running gateway on the stack's port answers through the published host port: Docker's
    forwarding gone (which a bind test takes for a free port) fails; None when it answers or
    there is nothing to probe. `gateway`: its container (or None), when read already."""
    from composer.engine.containers import gateway_container
    from composer.engine.published_port import DEAD_PORT, probe_published, published_address

    if client is None or not stack.gateway.enabled:
        return None
    if gateway is UNKNOWN:
        gateway = gateway_container(stack, client)
    if gateway is None or gateway.status != "running" or published_address(gateway, stack)[1] != stack.port:
        return None  # nothing to probe, or another port (`up` recreates the gateway anyway)
    if not probe_published(gateway, stack).dead:
        return None
    fix = "`compose-spec up --recreate-gateway` (the serving variant keeps running)"
    return Finding("port", "fail", DEAD_PORT, fix)


def check_bind_address(stack: Stack) -> Finding:
    """A port published beyond loopback reaches the network: say so."""
    address = ipaddress.ip_address(stack.bind_address)
    mapped = getattr(address, "ipv4_mapped", None)
    if (mapped or address).is_loopback:
        return Finding("bind-address", "ok", f"the API listens on {stack.bind_address} (this host only)")
    return Finding(
        "bind-address",
        "warn",
        f"the API port {stack.port} is published on {stack.bind_address}, beyond loopback: "
        "other machines can reach it (the API key is the only guard)",
        "set stack.bind_address (VLLM_BIND_ADDRESS) to 127.0.0.1 unless clients on the network need it",
    )


def check_rollback_image(client: docker.DockerClient, variant: str, image: str) -> Finding:
    """The serving variant's image is still present, so a failed swap can start it again."""
    found, error = _inspect(client, image)
    if error:
        return Finding(
            "rollback-image",
            "fail",
            f"cannot inspect the image {image} of the serving variant {variant}: {error}",
            "check the Docker engine, or pass --no-rollback to swap without a way back",
        )
    if found is None:
        return Finding(
            "rollback-image",
            "fail",
            f"the image {image} of the serving variant {variant} is no longer present: "
            f"stopping {variant} now would leave nothing to roll back to",
            f"restore the image (build or load {image}), or pass --no-rollback to swap without a way back",
        )
    return Finding("rollback-image", "ok", f"rollback target {variant}: image {image} is present")
