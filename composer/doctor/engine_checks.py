"""Docker checks: engine reachable, Compose v2 plugin, GPU support in the engine, images."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from composer.doctor.facts import VariantFacts
from composer.doctor.preflight import Finding, check_image
from composer.engine import fixes
from composer.errors import DockerUnavailable
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

MIN_ENGINE = (19, 3)  # first engine with --gpus and compose device reservations
NVIDIA_HOOK = "nvidia-container-runtime-hook"
DEMO_ONLY = "no GPU: demo only (GPU_DEVICES=none)"


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version)[:2])


def engine_finding(version: str) -> Finding:
    """Classify a reachable engine by its version."""
    where = os.environ.get("DOCKER_HOST", "the default socket")
    if _version_tuple(version) < MIN_ENGINE:
        return Finding(
            "docker-engine",
            "warn",
            f"Docker Engine {version} at {where} predates GPU support (--gpus, 19.03)",
            fixes.install_docker("a newer Docker Engine"),
        )
    return Finding("docker-engine", "ok", f"Docker Engine {version} at {where}")


def check_engine(
    client_factory: Callable[[], docker.DockerClient],
) -> tuple[Finding, docker.DockerClient | None]:
    """Connect once; the client (or None) is reused by the other Docker checks."""
    from docker.errors import DockerException

    try:
        client = client_factory()
        version = str(client.version().get("Version", "?"))
    except (DockerUnavailable, DockerException) as err:
        return Finding("docker-engine", "fail", str(err), fixes.start_docker()), None
    return engine_finding(version), client


def check_compose(compose_version: Callable[[], str]) -> Finding:
    """The Compose v2 plugin answers `docker compose version`."""
    try:
        version = compose_version()
    except DockerUnavailable as err:
        return Finding("compose-plugin", "fail", str(err), fixes.install_docker("the Compose v2 plugin"))
    if _version_tuple(version) < (2, 0):
        return Finding(
            "compose-plugin",
            "warn",
            f"Compose {version} is older than v2",
            fixes.install_docker("the Compose v2 plugin"),
        )
    return Finding("compose-plugin", "ok", f"Compose {version}")


def nvidia_runtime_finding(runtimes: Iterable[str], gpus_wanted: bool, hook_present: bool) -> Finding:
    """Classify the engine's GPU support from its runtimes and the NVIDIA hook."""
    names = sorted(runtimes)
    if not gpus_wanted:
        return Finding("nvidia-runtime", "ok", DEMO_ONLY)
    if "nvidia" in names:
        return Finding("nvidia-runtime", "ok", "the engine has the nvidia runtime")
    configure = "nvidia-ctk runtime configure --runtime=docker, then restart dockerd"
    if hook_present:
        return Finding(
            "nvidia-runtime",
            "warn",
            f"no nvidia runtime registered (runtimes: {', '.join(names)}); --gpus relies on {NVIDIA_HOOK}",
            configure,
        )
    return Finding(
        "nvidia-runtime",
        "fail",
        f"the engine cannot give GPUs to containers: runtimes {', '.join(names) or 'none'}, no {NVIDIA_HOOK}",
        f"install the NVIDIA Container Toolkit and run {configure}; or set GPU_DEVICES=none for a demo",
    )


def check_nvidia_runtime(stack: Stack, client: docker.DockerClient) -> Finding:
    """GPUs reach containers through the NVIDIA runtime (or the stack wants none)."""
    runtimes = (client.info().get("Runtimes") or {}).keys()
    return nvidia_runtime_finding(runtimes, stack.gpus is not None, shutil.which(NVIDIA_HOOK) is not None)


def check_gateway_image(stack: Stack, client: docker.DockerClient) -> Finding | None:
    """The gateway's image is present locally; None when the stack runs without a gateway."""
    if not stack.gateway.enabled:
        return None
    found = check_image(client, stack.gateway.image)
    fix = f"build or load it first ({fixes.build_image(stack.gateway.image)})" if found.fix else ""
    return replace(found, name="gateway-image", fix=fix)


def check_variant_image(variant: VariantFacts, client: docker.DockerClient) -> Finding:
    """The variant's image is present locally (preflight's check; never pulls)."""
    return check_image(client, variant.image)
