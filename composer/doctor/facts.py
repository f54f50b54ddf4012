"""What a variant's checks read: its facts, resolved once from its Target by the registry.

The checks see these facts, never the stack's `Variant`: the image reference it runs, the
host directories it mounts, its container environment (the one `ServiceSpec`'s, not a
second build of it), its speculative settings, and the stack table a fix is made in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from composer.render.spec import Mount
    from composer.stack.model import Speculative


@dataclass(frozen=True)
class VariantFacts:
    """One variant as its checks read it."""

    table: str  # the stack table its settings live in, `variants.mtp` (fixes name it)
    image: str  # the image reference it runs, resolved
    mounts: tuple[Mount, ...]  # the host directories its container mounts
    environment: dict[str, str]  # its container's environment, as rendered
    speculative: Speculative | None  # its speculative decoding settings (None: plain decode)
    dropped_args: tuple[tuple[str, str], ...] = ()  # inherited flags it runs without, and where from
    refused: str = ""  # why vLLM refuses it with a stack-wide setting (empty: it can start)

    @property
    def method(self) -> str | None:
        """The speculative method (None: plain decode)."""
        return self.speculative.method if self.speculative is not None else None
