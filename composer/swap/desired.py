"""What `up` asks for (pure): the desired set and its mode, from the names, the stack and ONE
snapshot (Docker's containers, or the cluster's Deployments); the CLI decides none of it.

`up X` is {X}, exclusive (where a live set runs, X replaces it: `plan.plan_alone`). `up A B`
is {A, B}, side by side: the live set is exactly those. `up` alone is the stack's
`[gateway] live` (without it, a usage error).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer.errors import ConfigError
from composer.stack.placement import live_members

if TYPE_CHECKING:
    from composer.stack.model import Stack

EXCLUSIVE = "exclusive"
SIDE_BY_SIDE = "side-by-side"


@dataclass(frozen=True)
class Desired:
    """The set `up` aims at: its variants, its mode, and the live members it replaces."""

    variants: tuple[str, ...]
    mode: str  # EXCLUSIVE: one variant serves alone; SIDE_BY_SIDE: a live set
    replaces: tuple[str, ...] = ()  # running live members an exclusive set replaces


def check_request(requested: Sequence[str], stack: Stack) -> None:
    """The names `up` was given, checked before Docker is asked anything (ConfigError, exit 2):
    each known and startable, several on disjoint GPU sets, none only with `[gateway] live`."""
    for name in requested:
        stack.startable(name)
    if len(requested) > 1:
        live_members(stack, requested)
    if not requested and not stack.gateway.live:
        raise ConfigError(
            f"up needs a VARIANT: one of {', '.join(stack.variants)} (or --recreate-gateway alone)"
        )


def desired(requested: Sequence[str], stack: Stack, live: Sequence[str]) -> Desired:
    """The desired set and its mode (see the module's docstring); `live`: the live members serving
    now (the snapshot's on Docker, the cluster's live Deployments on Kubernetes)."""
    check_request(requested, stack)
    if len(requested) == 1:
        return Desired(tuple(requested), EXCLUSIVE, tuple(live))
    return Desired(tuple(requested or stack.gateway.live), SIDE_BY_SIDE)
