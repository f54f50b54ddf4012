"""What `up` asks for (pure): the desired set and its mode, from the names, the stack and ONE snapshot.

- `up X` is {X}, exclusive: a plain switch to X. Where a live set runs, X replaces it (X's one
  serving container starts, then every member is drained and stopped: `live.plan_alone`);
  else it is the single swap.
- `up A B` is {A, B}, side by side: the live set is exactly those.
- `up` alone is the stack's `[gateway] live`, side by side; without it, a usage error.

The plan that gets there says how it changes what serves (`mode`: join, replace, unchanged,
refused); the CLI never reads Docker nor decides any of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer.errors import ConfigError

if TYPE_CHECKING:
    from composer.stack.model import Stack
    from composer.swap.snapshot import Snapshot

EXCLUSIVE = "exclusive"
SIDE_BY_SIDE = "side-by-side"


@dataclass(frozen=True)
class Desired:
    """The set `up` aims at: its variants, its mode, and the live members it replaces."""

    variants: tuple[str, ...]
    mode: str  # EXCLUSIVE: one variant serves alone; SIDE_BY_SIDE: a live set
    replaces: tuple[str, ...] = ()  # running live members an exclusive set replaces

    @property
    def engine(self) -> str:
        """`swap`: the single swap; `live`: the live plan (a live set, or {X} replacing one)."""
        return "swap" if self.mode == EXCLUSIVE and not self.replaces else "live"


def check_request(requested: Sequence[str], stack: Stack) -> None:
    """The names `up` was given, checked before Docker is asked anything (ConfigError, exit 2):
    each known and startable, several on disjoint GPU sets, none only with `[gateway] live`."""
    from composer.stack.placement import live_members

    for name in requested:
        stack.startable(name)
    if len(requested) > 1:
        live_members(stack, requested)
    if not requested and not stack.gateway.live:
        names = ", ".join(stack.variants)
        raise ConfigError(f"up needs a VARIANT: one of {names} (or --recreate-gateway alone)")


def desired(requested: Sequence[str], stack: Stack, snap: Snapshot) -> Desired:
    """The desired set and its mode (see the module's docstring)."""
    check_request(requested, stack)
    if len(requested) == 1:
        return Desired(tuple(requested), EXCLUSIVE, tuple(r.name for r in snap.live_running))
    return Desired(tuple(requested or stack.gateway.live), SIDE_BY_SIDE)
