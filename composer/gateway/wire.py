"""What the gateway server and its host-side client agree on: the headers a holder's and a
status probe carry, the single member's name, and a finished drain's report (standard library
only: both ends import it, neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass

PROBE_HEADER = "x-gateway-probe"
# Marks a request of `compose-spec status` (its readiness probe through the port): the gateway
# forwards it as any other but does not count it as a member's request.
STATUS_PROBE_HEADER = "x-gateway-status-probe"
SINGLE = "single"  # the single member's name in the state's `upstreams` (a live member's: VARIANT/REPLICA)


@dataclass(frozen=True)
class DrainReport:
    """A finished drain (`gate.Gate.drain`); its hold stays set: release it once the next backend serves."""

    hold_id: str
    drained: int
    cut: int  # still in flight at the timeout
    duration_s: float
    continued: int = 0  # streams paused to go on on the next variant
    refused: int = 0  # streams it could not continue
