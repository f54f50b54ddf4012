"""Typed operations of a change of what serves: each carries its arguments and knows its inverse.

A plan is a tuple of these (pure data, printed by `--dry-run` and `--json`); `execute` runs them
through a dispatch table and, on a failure or an interrupt, runs the inverses of what ran, in
reverse. An inverse is a tuple of operations (empty: nothing to undo); every inverse is safe to
run when its operation only half ran (stopping what is gone, publishing the set again).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from composer.render.spec import CONTAINER_PORT


@dataclass(frozen=True)
class Member:
    """A container the plan starts, gates, routes to or stops: everything the executor needs."""

    name: str  # the gateway's upstream name (`mtp/1`), or the variant of the one serving container
    variant: str
    container: str
    service: str  # the compose service that creates it
    run_file: str  # the compose file it starts from ("" when unknown: it cannot be started again)
    gpus: str = "-"
    speculative: bool = False  # the gate checks its acceptance

    @property
    def url(self) -> str:
        return f"http://{self.service}:{CONTAINER_PORT}"

    def upstream(self) -> dict[str, str]:
        return {"name": self.name, "variant": self.variant, "url": self.url}


@dataclass(frozen=True)
class Op:
    """One operation; subclasses name their arguments."""

    def inverse(self) -> tuple[Op, ...]:
        return ()

    def describe(self) -> str:
        raise NotImplementedError

    def as_data(self) -> dict[str, object]:
        return {"op": type(self).__name__, **asdict(self), "text": self.describe()}


@dataclass(frozen=True)
class StartGateway(Op):
    run_file: str

    def describe(self) -> str:
        return "start the gateway"


@dataclass(frozen=True)
class StartMember(Op):
    member: Member

    def inverse(self) -> tuple[Op, ...]:
        return (DrainMember(self.member.name), StopMember(self.member))

    def describe(self) -> str:
        return f"start {self.member.name} on GPUs {self.member.gpus} ({self.member.service})"


@dataclass(frozen=True)
class GateMember(Op):
    member: Member

    def describe(self) -> str:
        checks = "health, models, a completion, settle" + (", acceptance" if self.member.speculative else "")
        return f"gate {self.member.name} on its own address ({checks})"


@dataclass(frozen=True)
class Publish(Op):
    """Tell the gateway the set it routes among (`()`: back to its single upstream)."""

    upstreams: tuple[dict[str, str], ...]
    previous: tuple[dict[str, str], ...]

    def inverse(self) -> tuple[Op, ...]:
        return (Publish(self.previous, self.upstreams),)

    def describe(self) -> str:
        names = ", ".join(u["name"] for u in self.upstreams) or "its single upstream"
        return f"route the gateway to {{{names}}}"


@dataclass(frozen=True)
class DrainMember(Op):
    """Wait for the requests in flight on an upstream already left out of the set."""

    name: str

    def describe(self) -> str:
        return f"drain {self.name}'s requests in flight (up to gateway.drain_timeout)"


@dataclass(frozen=True)
class StopMember(Op):
    member: Member

    def inverse(self) -> tuple[Op, ...]:
        if not self.member.run_file:
            return ()
        return (AwaitRelease(self.member.gpus), StartMember(self.member), GateMember(self.member))

    def describe(self) -> str:
        return f"stop {self.member.name} ({self.member.container})"


@dataclass(frozen=True)
class AwaitRelease(Op):
    """Wait until the containers stopped before have released the GPUs `gpus` names."""

    gpus: str

    def describe(self) -> str:
        return f"wait until GPUs {self.gpus} are released"


def run_file_of(path: Path | str | None) -> str:
    """A run file as an operation carries it (the first of compose's comma-separated list)."""
    return str(path or "").split(",")[0]
