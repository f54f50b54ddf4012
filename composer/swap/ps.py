"""`ps`: the project's containers as a table, like `docker compose ps`: each variant (with
its state as the snapshot decides it: serving, asleep, awake, or Docker's), the gateway and
the optional services, with the host ports each publishes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from composer import labels as label_names
from composer.swap import snapshot

if TYPE_CHECKING:
    import docker

    from composer.stack.model import Stack


def published(attrs: dict[str, Any]) -> str:
    """The host ports a container publishes, as Docker writes them (`127.0.0.1:8000->8000/tcp`)."""
    ports = (attrs.get("NetworkSettings") or {}).get("Ports") or {}
    if not ports:  # not running: what it would publish
        ports = (attrs.get("HostConfig") or {}).get("PortBindings") or {}
    shown = (
        f"{binding.get('HostIp') or '0.0.0.0'}:{binding.get('HostPort')}->{inside}"
        for inside, bindings in sorted(ports.items())
        for binding in bindings or ()
        if ":" not in (binding.get("HostIp") or "")  # IPv6: Docker lists it beside the IPv4 binding
    )
    return ", ".join(dict.fromkeys(shown))


def ps_rows(snap: snapshot.Snapshot, others: list[Any]) -> list[dict[str, str]]:
    """One row per container (pure): the snapshot's variants, then `others`, each with its ports."""
    rows = []
    ready = _live_ready(snap)  # a live set's members: the gateway's readiness poll is their health
    for member in snap.members:
        attrs = member.container.container.attrs
        health = member.info.docker_health
        if member.info.name in ready:
            health = "ready" if ready[member.info.name] else "not ready"
        state = member.state + (f" ({health})" if health and member.running else "")
        rows.append(_row(member.info.name, member.variant, state, attrs))
    known = {m.info.name for m in snap.members}
    for container in others:
        if container.name in known:
            continue
        labels = container.labels or {}
        role = labels.get(label_names.ROLE) or labels.get(label_names.COMPOSE_SERVICE) or "-"
        health = ((container.attrs.get("State") or {}).get("Health") or {}).get("Status")
        if container.status == "running" and container.name in ready:  # not Docker's slower check
            health = "ready" if ready[container.name] else "not ready"
            state = f"serving ({health})" if ready[container.name] else f"running ({health})"
        else:
            state = container.status + (f" ({health})" if health and container.status == "running" else "")
        rows.append(_row(container.name, role, state, container.attrs))
    return rows


def _live_ready(snap: snapshot.Snapshot) -> dict[str, bool]:
    """Each live container the gateway reports on (by container name): whether it is ready."""
    from composer.swap.transaction import upstream_states

    states = upstream_states(snap.gateway_state.raw if snap.gateway_state else None)
    found = {m.container: states[m.name].get("ready") for m in snap.live if m.name in states}
    return {name: ready for name, ready in found.items() if isinstance(ready, bool)}


def _row(name: str, what: str, state: str, attrs: dict[str, Any]) -> dict[str, str]:
    return {"name": name, "variant": what, "state": state, "ports": published(attrs)}


def ps_data(stack: Stack, client: docker.DockerClient) -> list[dict[str, str]]:
    """The project's containers: one snapshot, and one listing for the rest of the project."""
    snap = snapshot.take(stack, client)
    others = client.containers.list(
        all=True, filters={"label": f"{label_names.COMPOSE_PROJECT}={stack.project}"}
    )
    return ps_rows(snap, sorted(others, key=lambda c: c.name or ""))


def format_ps(rows: list[dict[str, str]], project: str) -> str:
    """The rows as an aligned table (a line saying so when nothing runs)."""
    if not rows:
        return f"no container of project {project}"
    table = [["NAME", "VARIANT/ROLE", "STATE", "PORTS"]]
    table += [[r["name"], r["variant"], r["state"], r["ports"]] for r in rows]
    return aligned(table)


def aligned(table: list[list[str]]) -> str:
    """Rows of cells as text, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)
