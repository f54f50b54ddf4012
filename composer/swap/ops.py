"""Typed operations of a change of what serves: each carries its arguments and knows its inverse.

A plan is a tuple of these (pure data, printed by `--dry-run` and `--json`), a live change's
(`Start`, `Publish`, `Drain`, ...) or a single switch's (`Hold`, `Stop`, `Start`, `Gate`,
`Settle`, `Release`, ...). A type with several cases says which in its `how` field (a member
leaves by `Stop` stopped, put to sleep or removed; comes in by `Start` started, woken or
adopted). An inverse is a tuple of operations (empty: nothing to undo), safe to run when its
operation only half ran.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar, Literal

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


def _case(words: str | dict[str, str], how: str) -> str:
    return words if isinstance(words, str) else words.get(how, "")


@dataclass(frozen=True)
class Op:
    """One operation; `TEXT` says it in words, from its fields (per `how` case where the type has
    several). Where a live change and a single switch do one verb differently, the operation's
    `live` field says which (a live change's member is named by its member name, reached on its
    own address, published by `Publish`)."""

    TEXT: ClassVar[str | dict[str, str]] = ""
    STAGE: ClassVar[str | dict[str, str]] = ""  # what `status` shows while a single switch runs it
    live = False
    how = ""  # which case of its type (a type with several has a `how` field)

    def inverse(self) -> tuple[Op, ...]:
        return ()

    def describe(self) -> str:
        return _case(self.TEXT, self.how).format_map(self.__dict__)

    def as_data(self) -> dict[str, object]:
        return {"op": type(self).__name__, **asdict(self), "text": self.describe()}

    def stage(self) -> str:
        stage = _case(self.STAGE, self.how)
        return self.describe() if self.live or not stage else stage


@dataclass(frozen=True)
class UpdateGateway(Op):
    """The gateway started from `run_file`; replaced by a new container from it (`why`), pointed
    at `route` before it takes the port (the live set's members, or one `{url, variant}`: a
    standby's own container; none: its settings say), its port holder new too with `holder`;
    or its `settings` applied in place (`keys`: their names)."""

    TEXT: ClassVar[dict[str, str]] = {
        "start": "start the gateway",
        "replace": (
            "the gateway is replaced by a new container ({why}): start the new one with its new settings "
            "beside the old one, which then finishes its requests and stops"
        ),
        "in place": "apply the gateway's changed settings in place ({keys}): same container, nothing drained",
    }
    STAGE: ClassVar[dict[str, str]] = {"replace": "draining", "in place": "draining"}
    how: Literal["start", "replace", "in place"] = field()  # no default: Op.how is not one
    run_file: str = ""
    why: str = ""
    settings: tuple[tuple[str, str], ...] = ()
    keys: str = ""
    route: tuple[dict[str, str], ...] = ()
    holder: bool = False


@dataclass(frozen=True)
class Publish(Op):
    """Tell the gateway the set it routes among (`()`: back to its single upstream)."""

    upstreams: tuple[dict[str, str], ...]
    previous: tuple[dict[str, str], ...]
    single: str = ""  # with `()`: the variant the single upstream serves

    def inverse(self) -> tuple[Op, ...]:
        return (Publish(self.previous, self.upstreams),)

    def describe(self) -> str:
        names = ", ".join(u["name"] for u in self.upstreams)
        single = f"its single upstream, {self.single}" if self.single else "its single upstream"
        return f"route the gateway to {{{names or single}}}"


@dataclass(frozen=True)
class Drain(Op):
    """Wait for the requests in flight on an upstream already left out of the set: a `live`
    member (`continue_streams`: its eligible streams go on on the other members at once
    instead), else the one serving container `name` (the gateway's single upstream)."""

    name: str
    continue_streams: bool = True
    live: bool = True

    def describe(self) -> str:
        if not self.live:
            return f"drain the requests in flight on {self.name} (up to gateway.drain_timeout)"
        said = f"drain {self.name}'s requests in flight (up to gateway.drain_timeout)"
        return f"{said}; its streams go on on the other members" if self.continue_streams else said


@dataclass(frozen=True)
class Reapply(Op):
    """A Deployment rolled in place to `member`'s configuration (Kubernetes' two strategies
    over one object): a live member whose configuration changed (a rolling update), undone by
    going back to the revision before; or, `recreate`, the one serving Deployment rolled to
    another variant (a Recreate rollout of `member.run_file`), undone by going back and gating
    `previous` again (none: no revision to go back to, no inverse)."""

    member: Member
    previous: Member | None = None
    recreate: bool = False

    def describe(self) -> str:
        m = self.member
        if self.recreate:
            return f"roll {m.container} to {m.variant} (a Recreate rollout of {m.run_file})"
        return f"apply {m.name}'s new configuration in place ({m.container}, a rolling update)"

    def inverse(self) -> tuple[Op, ...]:
        if not self.recreate:
            return (RollBack(self.member),)
        return () if self.previous is None else (RollBack(self.member), Gate(self.previous, live=True))


@dataclass(frozen=True)
class RollBack(Op):
    TEXT = "roll {member.name} back to its previous revision ({member.container})"
    member: Member


@dataclass(frozen=True)
class AwaitRelease(Op):
    """Wait until the containers stopped before have released their GPUs."""

    TEXT = "wait until GPUs {gpus} are released"
    gpus: str


@dataclass(frozen=True)
class Hold(Op):
    """Released by `Release` (or to what serves after an undo); `run_file`: start the gateway first;
    `serving`: route a new gateway there first; `continue_streams`: streams pause at once."""

    TEXT = "hold new requests at the gateway and drain those in flight"
    STAGE = "draining"
    target: str
    run_file: str = ""
    recreate: bool = True
    serving: Member | None = None
    continue_streams: bool = False

    def describe(self) -> str:
        said = super().describe()
        where = "the new variant" if self.target else "the next member"
        return f"{said}; streams go on on {where}" if self.continue_streams else said


@dataclass(frozen=True)
class Stop(Op):
    """A member leaves: stopped (`also`: exited containers of the shared service go with it),
    undone by starting it again from exactly the run file and service that created it (`live`:
    as a live change does); put to `sleep`, undone by waking it; or `remove`d, gone already is
    fine (`network_of`: then `compose down` that run file, the network too; `cause`: why a plan
    removes it before anything else, none: an undo's), not undone."""

    TEXT: ClassVar[dict[str, str]] = {
        "stop": "stop {member.name} ({member.container})",
        "sleep": "put {member.variant} to sleep ({member.container})",
        "remove": "stop and remove {member.container}",
    }
    STAGE: ClassVar[dict[str, str]] = {"stop": "stopping", "sleep": "putting the serving variant to sleep"}
    member: Member
    how: Literal["stop", "sleep", "remove"] = "stop"
    also: tuple[str, ...] = ()
    settle: float = 1.0
    live: bool = False
    network_of: str = ""
    cause: str = ""

    def describe(self) -> str:
        return f"{super().describe()} ({self.cause})" if self.cause else super().describe()

    def inverse(self) -> tuple[Op, ...]:
        m = self.member
        if self.how == "sleep":
            return (Start(m, "wake"), Gate(m), Settle(m, self.settle, "wake", woke=True))
        if self.how == "remove" or not m.run_file:
            return ()
        if self.live:
            return (AwaitRelease(m.gpus), Start(m, live=True), Gate(m, live=True))
        return (Start(m), Gate(m), Settle(m, self.settle))


@dataclass(frozen=True)
class Start(Op):
    """A member comes in. `start`: the gateway's single upstream goes to it (a switch's target;
    undone by removing it, with `first` the project's network too: nothing ran before); `live`:
    a member, which `Publish` routes to once gated (undone by draining and stopping it). `wake`:
    its sleeping container is woken and routed to (undone by removing it). `adopt`: a running
    container serves as it runs (never restarted): the single upstream goes to it (undone by
    removing it); `live`: the one serving container joins the set as `member`, and the Publish
    that follows routes to it (that Publish's inverse undoes it)."""

    STAGE: ClassVar[dict[str, str]] = {"start": "loading", "wake": "waking", "adopt": "routing"}
    member: Member
    how: Literal["start", "wake", "adopt"] = "start"
    first: bool = False
    live: bool = False

    def describe(self) -> str:
        m = self.member
        if self.how == "adopt":
            if self.live:
                return f"adopt {m.container} as {m.name} as it runs (not restarted)"
            return f"route to {m.container}, which runs awake without serving (not restarted)"
        if self.how == "wake":
            return f"route to {m.variant}'s sleeping container {m.container} and wake it"
        if not self.live:
            return f"start {m.variant} from {m.run_file} (service {m.service}), route to it"
        gpus = "" if m.gpus == "-" else f" on GPUs {m.gpus}"  # placed by its engine
        return f"start {m.name}{gpus} ({m.service})"

    def inverse(self) -> tuple[Op, ...]:
        if self.live:
            return (Drain(self.member.name), Stop(self.member, live=True)) if self.how == "start" else ()
        return (Stop(self.member, "remove", network_of=self.member.run_file if self.first else ""),)


@dataclass(frozen=True)
class Route(Op):
    """The gateway forwards elsewhere: route it to the serving container again (nothing to undo)."""

    TEXT = "route the gateway to {member.variant} ({member.container})"
    STAGE = "routing"
    member: Member


@dataclass(frozen=True)
class Gate(Op):
    """Through the gateway, past its hold (a switch's target; `Settle` watches it next); `live`:
    on the member's own address with a settle watch (and its acceptance), before it is published."""

    STAGE = "gating"
    member: Member
    live: bool = False

    def describe(self) -> str:
        if not self.live:
            return f"gate {self.member.variant} through the gateway (health, models, a completion)"
        checks = "health, models, a completion, settle" + (", acceptance" if self.member.speculative else "")
        return f"gate {self.member.name} on its own address ({checks})"


@dataclass(frozen=True)
class Settle(Op):
    """Watch the ready member `seconds` from `since` ("ready", "wake", "process"), with `warmup`
    completions and after a wake (`woke`) its checks (and `acceptance`) beside it."""

    STAGE = "settling"
    member: Member
    seconds: float
    since: str = "ready"
    woke: bool = False
    warmup: int = 0
    acceptance: bool = False

    def describe(self) -> str:
        beside = (
            ["wake checks"] * self.woke + ["acceptance"] * self.acceptance + ["warm-up"] * bool(self.warmup)
        )
        return f"watch {self.member.variant} settle {self.seconds:g}s" + (
            f" ({', '.join(beside)})" * bool(beside)
        )


@dataclass(frozen=True)
class Release(Op):
    """`tell`: a new gateway learns which variant serves; undone (a failed probation) by holding again."""

    TEXT = "release the held requests to {variant}"
    STAGE = "releasing"
    variant: str  # "": a live set's members (published before it)
    tell: bool = False
    back: str = ""  # the variant an undo brings back: the switch its hold begins names it

    def inverse(self) -> tuple[Op, ...]:
        return (Hold(self.back),)

    def describe(self) -> str:
        return super().describe() if self.variant else "release the held requests to the live set"


@dataclass(frozen=True)
class Probation(Op):
    TEXT = "watch {member.variant} {seconds:g}s with clients served: a crash or a restart undoes the switch"
    STAGE = "on probation"
    member: Member
    seconds: float
