"""Following a service's log across swaps (like `docker compose logs -f`), and `--since` times.

When the followed container stops or is removed (a swap), the next container of the service
is followed from its start; one Docker restarts in place is resumed where it stopped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from composer.engine import retry
from composer.engine.containers import our_containers
from composer.errors import UsageError
from composer.stack.model import Stack

if TYPE_CHECKING:
    import docker

_RELATIVE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SINCE_HELP = "a duration such as 90s, 10m or 2h, a time such as 2024-05-01T10:00:00, or unix seconds"


def parse_since(raw: str, now: datetime | None = None) -> datetime:
    """A `--since` value (relative duration, ISO time, or unix seconds) as an aware datetime."""
    now = now or datetime.now(UTC)
    match = _RELATIVE.match(raw)
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    try:
        return datetime.fromtimestamp(float(raw), UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {raw!r}: expected {SINCE_HELP}") from None
    return moment if moment.tzinfo else moment.astimezone(UTC)


@dataclass(frozen=True)
class LogEvent:
    """Log text, or (switch=True) a note that another container is now followed."""

    text: str
    switch: bool = False


def follow_service(
    stack: Stack,
    client: docker.DockerClient,
    *,
    tail: int | None,
    since: datetime | None = None,
    timestamps: bool = False,
    poll: float = 0.5,
) -> Iterator[LogEvent]:
    """The service's log, container after container, until the caller stops iterating."""
    followed: str | None = None
    resume: datetime | None = since
    first = True
    waiting_said = False
    for attempt in retry.following(poll):
        with attempt:
            containers = our_containers(stack, client)
            newest = containers[0] if containers else None
            if newest is None or (newest.container.id == followed and newest.status != "running"):
                if newest is None and not waiting_said:
                    yield LogEvent(f"waiting for a variant container of project {stack.project}", switch=True)
                    waiting_said = True
                raise retry.Pending("no running container to follow yet")
            if newest.container.id != followed:
                if followed is not None or not first:
                    described = newest.describe()
                    yield LogEvent(f"now following {described.variant} ({newest.name})", switch=True)
                lines, resume = (tail if first else None), (since if first else None)
                followed = newest.container.id
            else:
                lines = None  # the same container, restarted in place: go on from where it stopped
            first = False
            waiting_said = False
            for chunk in newest.follow(lines, since=resume, timestamps=timestamps):
                yield LogEvent(chunk)
            resume = datetime.now(UTC)
            raise retry.Pending(f"{newest.name} stopped: looking for the next container")
