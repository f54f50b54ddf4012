"""Placement: the GPU sets of a variant's containers (`gpus = "0,1"`, or one per replica:
`["0,1", "2,3"]`, `"0,1;2,3"`), and a live set's checks: one `LiveMember` per container
(`mtp/1`), disjoint GPU sets. Every check raises ConfigError (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from composer.errors import ConfigError
from composer.stack.model import Stack, Variant

_DEVICE = re.compile(r"[0-9]+|GPU-[0-9a-fA-F-]+")
PLACEMENT_HELP = 'a GPU list such as "0,1,2,3", or one per replica such as ["0,1,2,3", "4,5,6,7"]'
MAX_REPLICAS = 64


def _one_set(raw: object) -> tuple[str, ...]:
    items = [str(i).strip() for i in raw] if isinstance(raw, list) else str(raw).split(",")
    items = [i.strip() for i in items if str(i).strip()]
    if not items or not all(_DEVICE.fullmatch(i) for i in items) or len(set(items)) != len(items):
        raise ValueError(PLACEMENT_HELP)
    return tuple(items)


def parse_placement(raw: object) -> tuple[tuple[str, ...], ...]:
    """GPU sets, one per replica: `"0,1"` or `[0, 1]` is one, `["0,1", "2,3"]` or `"0,1;2,3"` two."""
    if raw is None:
        return ()
    if isinstance(raw, bool):
        raise ValueError(PLACEMENT_HELP)
    if isinstance(raw, int):
        return (_one_set(str(raw)),)
    if isinstance(raw, str):
        return tuple(_one_set(part) for part in raw.split(";"))
    if isinstance(raw, list) and raw and all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        return (_one_set(raw),)
    if isinstance(raw, list) and raw and all(isinstance(i, str) for i in raw):
        return tuple(_one_set(part) for part in raw)
    raise ValueError(PLACEMENT_HELP)


def parse_replicas(raw: object) -> int:
    """A whole number from 1 to 64."""
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_REPLICAS:
        raise ValueError(f"a whole number from 1 to {MAX_REPLICAS}")
    return int(text)


def check_replicas(name: str, gpus: tuple[tuple[str, ...], ...], replicas: int | None) -> int:
    """The replica count: as written, else one per GPU set; a mismatch is refused."""
    if replicas is None:
        return max(1, len(gpus))
    if gpus and len(gpus) != replicas:
        raise ConfigError(
            f"variants.{name}.replicas = {replicas} but variants.{name}.gpus lists {len(gpus)} GPU set(s): "
            f"expected one GPU set per replica, e.g. gpus = {_example(replicas)}"
        )
    return replicas


def _example(replicas: int) -> str:
    sets = [",".join(str(i * 4 + j) for j in range(4)) for i in range(min(replicas, 3))]
    return "[" + ", ".join(f'"{s}"' for s in sets) + (", ...]" if replicas > 3 else "]")


@dataclass(frozen=True)
class LiveMember:
    """One container of a live set: a variant's replica and its GPU set (empty: none named)."""

    variant: str
    index: int  # 1-based
    gpus: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The upstream's name, as the gateway and `status` show it: `mtp/1`."""
        return f"{self.variant}/{self.index}"

    @property
    def gpus_text(self) -> str:
        return ",".join(self.gpus) if self.gpus else "-"


def members_of(variant: Variant) -> list[LiveMember]:
    """A variant's containers in a live set, one per replica."""
    return [
        LiveMember(variant.name, i + 1, variant.gpus[i] if i < len(variant.gpus) else ())
        for i in range(variant.replicas)
    ]


def live_members(stack: Stack, names: Sequence[str]) -> list[LiveMember]:
    """The live set's containers, checked: known variants, each named once, disjoint GPU sets."""
    return check_live(stack.variants, names, gpus_used=stack.gpus is not None)


def check_live(
    variants: Mapping[str, Variant], names: Iterable[str], gpus_used: bool = True
) -> list[LiveMember]:
    """See `live_members`; `gpus_used` is False with GPU_DEVICES=none (the sets are still checked)."""
    names = list(names)
    known = ", ".join(sorted(variants))
    for name in names:
        if name not in variants:
            raise ConfigError(
                f"unknown variant {name!r} in the live set: expected variant names among {known}"
            )
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"variant {twice!r} is named twice in the live set: name each variant once")
    members = [m for name in names for m in members_of(variants[name])]
    if gpus_used and len(members) > 1:
        unplaced = next((m for m in members if not m.gpus), None)
        if unplaced is not None:
            raise ConfigError(
                f"variants.{unplaced.variant}.gpus is not set: a live set of {len(members)} containers "
                f'needs a GPU set for each (e.g. gpus = "0,1,2,3"), or GPU_DEVICES=none for the simulator'
            )
    for i, first in enumerate(members):  # no two containers share a GPU
        for second in members[i + 1 :]:
            shared = [g for g in first.gpus if g in second.gpus]
            if shared:
                raise ConfigError(
                    f"GPU sets overlap: {first.name} (GPUs {first.gpus_text}) and {second.name} "
                    f"(GPUs {second.gpus_text}) share GPU {','.join(shared)}: give each live container "
                    "disjoint GPUs (variants.<name>.gpus), or run them one at a time"
                )
    return members
