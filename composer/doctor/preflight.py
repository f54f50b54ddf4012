"""Fast checks before a swap: nothing is changed when one fails."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from composer import labels
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

    from composer.render.spec import Target

WEAK_API_KEYS = frozenset(
    {
        "sk-123456",
        "sk-1234",
        "sk-12345678",
        "token-abc123",
        "empty",
        "none",
        "changeme",
        "change-me",
        "password",
        "secret",
        "test",
        "123456",
        "12345678",
        "admin",
        "vllm",
    }
)
MIN_KEY_LENGTH = 16


@dataclass(frozen=True)
class Finding:
    """One check's outcome: `ok`, `warn` or `fail`, what was seen, and the fix."""

    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def check_api_key(stack: Stack, allow_weak: bool = False) -> Finding:
    """The API key is set, not a known weak default, and not short."""
    key = stack.api_key
    if not key:
        return Finding("api-key", "fail", "VLLM_API_KEY is not set", "set VLLM_API_KEY in .env")
    if key.strip().lower() in WEAK_API_KEYS:
        status = "warn" if allow_weak else "fail"
        return Finding(
            "api-key",
            status,
            "VLLM_API_KEY is a well-known weak default",
            "generate one: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
            + ("" if allow_weak else " (or pass --allow-weak-key)"),
        )
    if len(key) < MIN_KEY_LENGTH:
        return Finding(
            "api-key",
            "warn",
            f"VLLM_API_KEY is short ({len(key)} characters)",
            f"use at least {MIN_KEY_LENGTH} random characters",
        )
    return Finding("api-key", "ok", "VLLM_API_KEY is set")


def check_image(client: docker.DockerClient, image: str) -> Finding:
    """The image is present locally (never pulled)."""
    from docker.errors import ImageNotFound

    try:
        found = client.images.get(image)
    except ImageNotFound:
        return Finding(
            "image",
            "fail",
            f"image {image} is not present locally (images are never pulled)",
            f"build or load it first (make image-sim for the simulator, make image-dflash2 for the overlay, "
            f"or docker pull {image} on a connected host)",
        )
    return Finding("image", "ok", f"image {image} is present ({found.short_id})")


def check_mounts(target: Target) -> list[Finding]:
    """Every host directory the variant mounts exists."""
    from composer.render.spec import resolve

    findings = []
    for mount in target.spec.mounts:
        source = resolve(mount.source)
        if Path(source).is_dir():
            findings.append(Finding("mounts", "ok", f"{source} exists"))
        else:
            var = next((p.name for p in mount.source if not isinstance(p, str)), "the stack")
            findings.append(
                Finding(
                    "mounts",
                    "fail",
                    f"model directory {source} (mounted at {mount.target}) does not exist",
                    f"set {var} to the checkpoint directory",
                )
            )
    return findings


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (we can bind it ourselves)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check_port(stack: Stack, client: docker.DockerClient | None) -> Finding:
    """The port is free, or held by our own current container."""
    host = "0.0.0.0" if stack.bind_address in {"", "*"} else stack.bind_address
    if port_is_free(host, stack.port):
        return Finding("port", "ok", f"{host}:{stack.port} is free")
    if client is not None:
        ours = client.containers.list(
            filters={"label": [f"{labels.PORT}={stack.port}", labels.VARIANT]},
        )
        if ours:
            variant = ours[0].labels.get(labels.VARIANT, "?")
            return Finding("port", "ok", f"port {stack.port} is held by our {variant} container")
    return Finding(
        "port",
        "fail",
        f"port {stack.port} on {host} is in use by a process that is not ours",
        "stop that process or choose another port (VLLM_PORT)",
    )
