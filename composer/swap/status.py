"""The running variant as plain data and text; the API key is never part of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from composer.engine.containers import current_variant, our_containers
from composer.engine.gate import probe_once, running_target
from composer.render.spec import resolve_target
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker


def status_data(stack: Stack, client: docker.DockerClient) -> dict[str, object]:
    """What runs for this stack, read from Docker and one readiness probe."""
    running = current_variant(stack, client)
    stopped = [c.describe() for c in our_containers(stack, client) if c.status != "running"]
    if running is None:
        return {
            "project": stack.project,
            "running": False,
            "variant": None,
            "stopped": [s.name for s in stopped],
        }
    target = running_target(stack, running)
    ready = probe_once(target)
    current_hash = None
    if running.variant in stack.variants:
        current_hash = resolve_target(stack, running.variant).hash
    uptime = running.uptime_seconds()
    return {
        "project": stack.project,
        "running": True,
        "variant": running.variant,
        "container": running.name,
        "image": running.image,
        "health": "ready" if ready else "not ready",
        "docker_health": running.docker_health,
        "uptime_seconds": round(uptime, 1) if uptime is not None else None,
        "port": running.port,
        "url": target.url,
        "served_model_name": running.served_name,
        "config_hash": running.config_hash,
        "matches_stack": current_hash == running.config_hash if current_hash else None,
        "stopped": [s.name for s in stopped],
    }


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def format_status(data: dict) -> str:
    """Human-readable form of status_data()."""
    if not data["running"]:
        return f"project {data['project']}: no variant is running"
    stale = {True: "yes", False: "no (the stack changed since it started)", None: "unknown variant"}
    rows = [
        ("variant", data["variant"]),
        ("health", data["health"] + (f" (docker: {data['docker_health']})" if data["docker_health"] else "")),
        ("served name", data["served_model_name"]),
        ("url", data["url"]),
        ("image", data["image"]),
        ("container", data["container"]),
        ("uptime", _duration(data["uptime_seconds"])),
        ("matches stack", stale[data["matches_stack"]]),
    ]
    return "\n".join(f"{key:<14}{value}" for key, value in rows)
