"""The logs `compose-spec logs` prints, the API key masked: the newest variant container's (none
named), the gateway's, a named variant's newest (a sleeping one too), or the last failed swap's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from composer.engine.bootlog import redact
from composer.engine.containers import gateway_container, our_containers
from composer.engine.diagnose import explain
from composer.engine.variant_container import VariantContainer
from composer.errors import ComposerError, unknown_choice
from composer.stack.model import Stack
from composer.swap.evidence import last_failure

if TYPE_CHECKING:
    import docker

GATEWAY = "gateway"


def log_sources(stack: Stack) -> list[str]:
    """What `logs SERVICE` accepts: `gateway` and each variant's name."""
    return [GATEWAY, *sorted(stack.variants)]


def check_service(stack: Stack, service: str | None) -> None:
    """Refuse (UsageError) a name that is neither `gateway` nor a variant of the stack."""
    if service is not None and service not in log_sources(stack):
        raise unknown_choice("service", service, log_sources(stack))


def service_container(stack: Stack, client: docker.DockerClient, service: str | None) -> VariantContainer:
    """The container whose log `logs [SERVICE]` prints; ComposerError when there is none."""
    check_service(stack, service)
    if service == GATEWAY:
        found = gateway_container(stack, client)
        if found is None:
            raise ComposerError(
                f"project {stack.project} has no gateway container "
                "(start a variant with `compose-spec up VARIANT`)"
            )
        return VariantContainer(found)
    containers = our_containers(stack, client)
    if service is not None:
        containers = [c for c in containers if c.describe().variant == service]
    if not containers:
        which = f"of variant {service} " if service else ""
        raise ComposerError(
            f"no variant container {which}exists (start one with `compose-spec up {service or 'VARIANT'}`)"
        )
    return containers[0]


def service_log(
    stack: Stack,
    client: docker.DockerClient,
    service: str | None,
    *,
    tail: int | None,
    since: datetime | None = None,
    timestamps: bool = False,
) -> str:
    """The log of `logs [SERVICE]`, key masked."""
    container = service_container(stack, client, service)
    return redact(container.log(tail=tail, since=since, timestamps=timestamps), stack.api_key)


@dataclass(frozen=True)
class FailedLog:
    """The log kept from the last failed swap (what it was, then its text), key masked."""

    header: str
    text: str


def failed_log(stack: Stack, tail: int | None) -> FailedLog:
    """The last failed swap's saved log, its last `tail` lines (all with None); ComposerError when
    none was recorded."""
    saved = last_failure(stack.project)
    if saved is None:
        raise ComposerError(f"no failed swap has been recorded for project {stack.project}")
    lines = redact(saved.log, stack.api_key).splitlines(keepends=True)
    text = "".join(lines if tail is None else lines[-tail:] if tail else [])
    return FailedLog(f"last failed swap: {saved.variant} at {saved.when}: {saved.cause}", text)


def explanations(text: str) -> list[str]:
    """Each known failure signature in a log: its name, explanation and fix (two lines)."""
    return [f"{s.name}: {s.explanation}\n  fix: {s.fix}" for s in explain(text)]


def failure_note(stack: Stack) -> str | None:
    """A note that the last failed swap kept its log, when one did."""
    saved = last_failure(stack.project)
    if saved is None:
        return None
    return (
        f"the last failed swap ({saved.variant}, {saved.when}) kept its log: "
        "compose-spec logs --failed --explain"
    )
