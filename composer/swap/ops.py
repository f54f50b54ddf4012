"""Typed operations of a change of what serves: each carries its arguments and knows its inverse.

A plan is a tuple of these (pure data, printed by `--dry-run` and `--json`); `execute` runs them
through a dispatch table and, on a failure or an interrupt, runs the inverses of what ran, in
reverse. An inverse is a tuple of operations (empty: nothing to undo), safe to run when its
operation only half ran (stopping what is gone, publishing the set again).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from composer.render.spec import CONTAINER_PORT


@dataclass(frozen=True)
class Member:
    """A container the plan starts, gates, routes to or stops: everything the executor needs."""

    name: str  # the gateway's upstream name (`mtp/1`), or the variant of the one serving container
    variant: str
    container: str
    service: str  # the compose service that creates it
    run_file: str  # the compose file it starts from ("": it cannot be started again)
    gpus: str = "-"
    speculative: bool = False  # the gate checks its acceptance

    def upstream(self) -> dict[str, str]:
        return {"name": self.name, "variant": self.variant, "url": f"http://{self.service}:{CONTAINER_PORT}"}


@dataclass(frozen=True)
class Op:
    """One operation; `TEXT` says it in words, from its fields."""

    TEXT: ClassVar[str] = ""

    def inverse(self) -> tuple[Op, ...]:
        return ()

    def describe(self) -> str:
        return self.TEXT.format_map(self.__dict__)

    def as_data(self) -> dict[str, object]:
        return {"op": type(self).__name__, **asdict(self), "text": self.describe()}


@dataclass(frozen=True)
class StartGateway(Op):
    TEXT = "start the gateway"
    run_file: str


@dataclass(frozen=True)
class StartMember(Op):
    member: Member

    def describe(self) -> str:
        gpus = "" if self.member.gpus == "-" else f" on GPUs {self.member.gpus}"  # placed by its engine
        return f"start {self.member.name}{gpus} ({self.member.service})"

    def inverse(self) -> tuple[Op, ...]:
        return (DrainMember(self.member.name), StopMember(self.member))


@dataclass(frozen=True)
class AdoptMember(Op):
    """The one serving container joins the set as `member` as it runs: never stopped or
    restarted. It changes nothing by itself (its inverse is empty): the Publish that follows
    routes to it, and that Publish's inverse gives the gateway back its single upstream."""

    TEXT = "adopt {member.container} as {member.name} as it runs (not restarted)"
    member: Member


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
        names = ", ".join(u["name"] for u in self.upstreams)
        return f"route the gateway to {{{names or 'its single upstream'}}}"


@dataclass(frozen=True)
class DrainMember(Op):
    """Wait for the requests in flight on an upstream already left out of the set;
    `continue_streams`: its eligible streams go on on the other members at once instead."""

    TEXT = "drain {name}'s requests in flight (up to gateway.drain_timeout)"
    name: str
    continue_streams: bool = True

    def describe(self) -> str:
        said = super().describe()
        return f"{said}; its streams go on on the other members" if self.continue_streams else said


@dataclass(frozen=True)
class Reapply(Op):
    """A member whose configuration changed, applied in place (Kubernetes: its Deployment rolls
    to the new revision); undone by going back to the revision before."""

    TEXT = "apply {member.name}'s new configuration in place ({member.container}, a rolling update)"
    member: Member

    def inverse(self) -> tuple[Op, ...]:
        return (RollBack(self.member),)


@dataclass(frozen=True)
class RollBack(Op):
    TEXT = "roll {member.name} back to its previous revision ({member.container})"
    member: Member


@dataclass(frozen=True)
class DrainSingle(Op):
    """Wait for the requests in flight on the one serving container (not a member): the set
    takes every new request once it is published."""

    TEXT = "drain the requests in flight on {container} (up to gateway.drain_timeout)"
    container: str


@dataclass(frozen=True)
class StopMember(Op):
    TEXT = "stop {member.name} ({member.container})"
    member: Member

    def inverse(self) -> tuple[Op, ...]:
        if not self.member.run_file:
            return ()
        return (AwaitRelease(self.member.gpus), StartMember(self.member), GateMember(self.member))


@dataclass(frozen=True)
class AwaitRelease(Op):
    """Wait until the containers stopped before have released their GPUs."""

    TEXT = "wait until GPUs {gpus} are released"
    gpus: str


@dataclass(frozen=True)
class HoldGateway(Op):
    """Hold new requests at the gateway and wait for the ones in flight (a switch of the one
    serving variant: nothing serves beside it); `continue_streams`: eligible streams pause,
    to go on on the new variant. ReleaseGateway ends it, last in the plan or as its inverse."""

    continue_streams: bool = False

    def describe(self) -> str:
        said = "hold new requests at the gateway; drain the requests in flight (up to gateway.drain_timeout)"
        return f"{said}; streams go on on the new variant" if self.continue_streams else said

    def inverse(self) -> tuple[Op, ...]:
        return (ReleaseGateway(),)


@dataclass(frozen=True)
class ReleaseGateway(Op):
    TEXT = "release the held requests to what serves"


@dataclass(frozen=True)
class UpdateGateway(Op):
    """The gateway's own configuration changed: it is rolled first, on its own (its new pod is
    ready before the old one stops). It serves the variant before as well: nothing undoes it."""

    TEXT = "roll the gateway to its new configuration first ({run_file})"
    run_file: str


@dataclass(frozen=True)
class Roll(Op):
    """The one serving Deployment switched to `member`'s variant (a Recreate rollout from
    `member.run_file`). Undone by RollBack and the gate of `previous`, the variant it ran
    before; without one (a new Deployment, or the same configuration again) there is no
    revision to go back to and the inverse is empty."""

    TEXT = "roll {member.container} to {member.variant} (a Recreate rollout of {member.run_file})"
    member: Member
    previous: Member | None = None

    def inverse(self) -> tuple[Op, ...]:
        return () if self.previous is None else (RollBack(self.member), GateMember(self.previous))
