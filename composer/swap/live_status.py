"""The live set as `status` and `ls` show it: every live container with its GPUs, readiness,
outstanding requests and what it served (the last minute when the gateway reports it).

Docker says which containers run and on which GPUs (labels); the gateway's state says,
per upstream, ready, outstanding, served and errors. A field the gateway does not report
is None, shown as "-".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from composer.errors import ComposerError
from composer.stack.model import Stack
from composer.swap.live import live_containers, upstream_states

if TYPE_CHECKING:
    import docker

LAST_MINUTE_KEYS = ("served_1m", "served_last_minute", "served_60s")


def _gateway_raw(stack: Stack, client: docker.DockerClient) -> Mapping[str, Any] | None:
    from composer.engine.containers import gateway_container
    from composer.gateway.client import GatewayControl

    container = gateway_container(stack, client)
    if container is None or container.status != "running":
        return None
    try:
        return GatewayControl(container).state().raw
    except ComposerError:
        return None


def _number(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def live_rows(
    stack: Stack, client: docker.DockerClient, gateway_raw: Mapping[str, Any] | None = None, read: bool = True
) -> list[dict[str, object]]:
    """One row per live container; `gateway_raw` is the gateway's state when already read."""
    try:
        running = live_containers(stack, client)
    except Exception:  # Docker gone: status says so elsewhere
        return []
    if not running:
        return []
    if gateway_raw is None and read:
        gateway_raw = _gateway_raw(stack, client)
    states = upstream_states(gateway_raw)
    rows = []
    for member in running:
        state = states.get(member.name, {})
        last_minute = next((state[k] for k in LAST_MINUTE_KEYS if k in state), None)
        ready = state.get("ready")
        rows.append(
            {
                "name": member.name,
                "variant": member.variant,
                "container": member.container,
                "state": member.status,
                "gpus": member.gpus,
                "routed": member.name in states if states else None,
                "ready": ready if isinstance(ready, bool) else None,
                "outstanding": _number(state.get("outstanding")),
                "served": _number(state.get("served")),
                "served_last_minute": _number(last_minute),
                "errors": _number(state.get("errors")),
            }
        )
    return rows


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_live(rows: list[dict[str, object]]) -> str:
    """The live containers as a table ("-": not reported by the gateway)."""
    table = [["LIVE", "CONTAINER", "STATE", "GPUS", "READY", "OUTSTANDING", "SERVED/1M", "SERVED", "ERRORS"]]
    for row in rows:
        table.append(
            [
                str(row["name"]),
                str(row["container"]),
                str(row["state"]),
                str(row["gpus"]),
                _cell(row["ready"]),
                _cell(row["outstanding"]),
                _cell(row["served_last_minute"]),
                _cell(row["served"]),
                _cell(row["errors"]),
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)
