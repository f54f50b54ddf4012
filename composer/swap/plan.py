"""The plan of every change of what serves (`Plan`), made from one snapshot before anything stops (pure).

`decide()` reads a `Snapshot`, the target and what the operations carry beyond it (`Bring`)
and plans a switch: typed operations (`composer.swap.ops`) naming every container they
touch, each with its inverse: the gateway's update, hold and release; stop what neither
serves nor sleeps as wanted; sleep or stop the serving variant (and the GPU release wait);
wake, adopt, route to or start the target; gate, settle, probation. `plan_live` plans a live
set's change (`up A B`), `plan_alone` `up X` on a running live set (Docker and Kubernetes
alike). Every plan is one `Plan`: `--dry-run` prints it (`describe`), `as_data()` is its
JSON. `rollback_source_problem` (the one function here that reads a file) checks before
anything stops that the rollback's run file is readable.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine.containers import RunningVariant
from composer.render.spec import Owner
from composer.swap import ops
from composer.swap.journal import SwapRecord
from composer.swap.ops import Member, Op
from composer.swap.outcome import UpResult
from composer.swap.standby import ACCEPTANCE_WARMUP_REQUESTS

if TYPE_CHECKING:
    from composer.render.live import LiveTarget
    from composer.swap.snapshot import LiveRunning, Snapshot


@dataclass(frozen=True)
class GatewayChange:
    """`recreate`: why a new container is needed ("" when none is); `settings`: every live
    setting as the stack wants it, to apply in place; `changed`: the names that differ."""

    recreate: str = ""
    settings: tuple[tuple[str, str], ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def in_place(self) -> bool:
        return bool(self.changed) and not self.recreate

    def keys(self) -> str:
        """`max_held, hold_timeout`: the changed settings as `[gateway]` keys."""
        return ", ".join(name.removeprefix("GATEWAY_").lower() for name in self.changed)


@dataclass(frozen=True)
class Foreign:
    """A running container of the project that another stack started (its labels say so)."""

    variant: str
    container: str
    owner: Owner
    other_file: bool  # started from another stack file
    differences: tuple[str, ...]  # how it serves differently (served name, key)

    def describe(self, project: str) -> str:
        who = "another stack" if self.other_file else "this stack file"
        line = f"{self.variant} ({self.container}) was started by {who}, {self.owner.stack_file}"
        with_ = f", with {' and '.join(self.differences)}" if self.differences else ""
        return f"{line} (project {project}){with_}"


def foreign_members(ours: Owner | None, running: Iterable[tuple[str, str, Owner | None]]) -> list[Foreign]:
    """The running containers (variant, name, recorded owner) another stack started (pure).
    Nothing is foreign to a stack that records no owner, nor a container that records none."""
    if ours is None:
        return []
    found = []
    for variant, container, owner in running:
        if owner is None:
            continue
        other_file = owner.stack_file != ours.stack_file
        differences = tuple(ours.differences(owner))
        if other_file or differences:
            found.append(Foreign(variant, container, owner, other_file, differences))
    return found


def takeover_refusal(found: list[Foreign], project: str) -> str:
    """Why `up` refuses to replace or join another stack's containers, and the ways out."""
    first = found[0]
    return (
        f"{first.describe(project)}: replacing or joining it would break that stack's clients "
        f"(401 or 404): stop it from there (`compose-spec -f {first.owner.stack_file} down`), give this "
        "stack its own project (-p NAME, or stack.project), or pass --takeover to replace it anyway"
    )


def snapshot_foreign(snapshot: Snapshot, owner: Owner | None) -> list[Foreign]:
    """The snapshot's running containers that another stack started (pure)."""
    return foreign_members(
        owner, [(m.variant, m.info.name, m.info.owner) for m in snapshot.members if m.running]
    )


def takeover_notes(found: list[Foreign], project: str) -> list[str]:
    return [f"takes over: {f.describe(project)}" for f in found]


@dataclass(frozen=True)
class Rollback:
    """Where the serving variant comes back from if the swap fails (its `Stop`'s inverse)."""

    variant: str
    how: str  # "wake" (its sleeping container) or "start" (the file that created it)
    container: str
    config_file: str | None = None
    service: str | None = None


@dataclass(frozen=True)
class Bring:
    """What the operations carry beyond the snapshot, resolved once at the edge: the target's
    container, the serving variant's source when its run file is gone, GPUs, watches."""

    member: Member
    gateway: bool = False
    gpus: str = "all"
    settle: float = 1.0
    warmup: int = 0
    probation: float = 0.0
    source: tuple[str, str] | None = None
    shared_service: str = "vllm"


@dataclass(frozen=True)
class Plan:
    """Every change of what serves, whatever made it (a switch, a live set's change, one variant
    replacing a set, `down`, `--recreate-gateway`, Kubernetes' too): what serves `before`, the
    set wanted `after` (a variant, or live members `mtp/1`; none for `down`) and the typed
    operations in order (`composer.swap.ops`); everything else is read from the operations."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    ops: tuple[Op, ...] = ()
    notes: tuple[str, ...] = ()
    refused: str = ""  # why nothing changes: another stack started what runs (no --takeover)
    capacity: dict[str, object] = field(default_factory=dict)  # composer.capacity's figures

    @property
    def serving(self) -> str | None:
        return "+".join(self.before) or None

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants of the set wanted after (a member `mtp/1` is variant `mtp`)."""
        return tuple(dict.fromkeys(name.split("/")[0] for name in self.after))

    @property
    def target(self) -> str:
        return "+".join(self.variants)

    @property
    def single(self) -> bool:
        """A switch of the one serving container: no live member (`mtp/1`) before or after."""
        return not any("/" in name for name in (*self.before, *self.after))

    @property
    def no_op(self) -> bool:
        return bool(self.refused) or not self.ops

    @property
    def steps(self) -> tuple[str, ...]:
        """The change's steps in words (`stop`, `release`, `start`, `gate`, ...), from its operations."""
        return tuple(STEPS[type(op), op.how] for op in self.ops if (type(op), op.how) in STEPS)

    @property
    def started(self) -> tuple[str, ...]:
        """What the plan starts, wakes, adopts as the serving variant or rolls to (by name)."""
        return tuple(
            op.member.name
            for op in self.ops
            if (isinstance(op, ops.Start) and not (op.live and op.how == "adopt"))
            or isinstance(op, ops.Reapply)
        )

    @property
    def leaving(self) -> tuple[str, ...]:
        """What stops (or sleeps) for good: stopped and not started again."""
        gone = [op.member.name for op in self.ops if isinstance(op, ops.Stop) and op.how != "remove"]
        gone += [
            op.previous.name
            for op in self.ops
            if isinstance(op, ops.Reapply) and op.recreate and op.previous is not None
        ]
        return tuple(sorted(set(gone) - set(self.started)))

    @property
    def keep(self) -> tuple[str, ...]:
        """What serves throughout, untouched."""
        touched = {*self.started, *(op.member.name for op in self.ops if isinstance(op, ops.Stop))}
        return tuple(name for name in self.before if name not in touched and name in self.after)

    @property
    def start(self) -> tuple[str, ...]:
        return tuple(name for name in dict.fromkeys(self.started) if name not in self.before)

    @property
    def replace(self) -> tuple[str, ...]:
        """What runs before and is started again (its configuration changed)."""
        return tuple(name for name in dict.fromkeys(self.started) if name in self.before)

    @property
    def alone(self) -> str | None:
        """`up X` on a live set: X's one serving container replaces the set (`plan_alone`)."""
        back = (op for op in self.ops if isinstance(op, ops.Publish) and not op.upstreams and op.single)
        return next((op.single for op in back), None)

    @property
    def start_gateway(self) -> bool:
        return any(isinstance(op, ops.UpdateGateway) and op.how == "start" for op in self.ops)

    @property
    def gateway_recreate_because(self) -> str | None:
        replaced = (op for op in self.ops if isinstance(op, ops.UpdateGateway) and op.how == "replace")
        return next((op.why for op in replaced), None)

    @property
    def gateway_in_place(self) -> list[str]:
        """The gateway settings applied in place (`GATEWAY_MAX_HELD`, ...)."""
        applied = (op for op in self.ops if isinstance(op, ops.UpdateGateway) and op.how == "in place")
        return [f"GATEWAY_{key.upper()}" for op in applied for key in op.keys.split(", ") if key]

    @property
    def stop_first(self) -> tuple[str, ...]:
        return tuple(op.member.container for op in self.ops if isinstance(op, ops.Stop) and op.cause)

    @property
    def wake(self) -> str | None:
        woken = (op.member for op in self.ops if isinstance(op, ops.Start) and op.how == "wake")
        return next((m.container for m in woken), None)

    @property
    def rollback(self) -> Rollback | None:
        """Where the serving variant comes back from if the switch fails (none for `down`)."""
        for op in self.ops if self.after else ():
            if isinstance(op, ops.Stop) and op.how == "sleep" and not op.live:
                return Rollback(op.member.variant, "wake", op.member.container)
            if isinstance(op, ops.Stop) and op.how == "stop" and not op.live:
                m = op.member
                return Rollback(m.variant, "start", m.container, m.run_file or None, m.service or None)
        return None

    @property
    def mode(self) -> str:
        """`replace` (a variant leaves), `join` (none does), `down`, `unchanged` or `refused`."""
        if self.no_op:
            return "refused" if self.refused else "unchanged"
        if not self.after:
            return "down"
        gone = {name.split("/")[0] for name in self.leaving} - set(self.variants)
        return "replace" if gone or self.alone else "join"

    def as_data(self) -> dict[str, object]:
        """The plan as JSON-ready data (no secrets: names, operations and files only)."""
        return {
            "mode": self.mode,
            "serving": self.serving,
            "target": self.target or None,
            "leaving": list(self.leaving),
            "keep": list(self.keep),
            "start": list(self.start),
            "replace": list(self.replace),
            "alone": self.alone,
            "operations": [op.as_data() for op in self.ops],
            "notes": list(self.notes),
            "refused": self.refused or None,
            "steps": list(self.steps),
            "stop_first": list(self.stop_first),
            "rollback": self.rollback.__dict__ if self.rollback else None,
            "wake": self.wake,
            "gateway_update": self.gateway_recreate_because is not None,
            "gateway_recreate_because": self.gateway_recreate_because,
            "gateway_in_place": self.gateway_in_place,
            "capacity": self.capacity or None,
        }

    def describe(self) -> str:
        """The plan as text (`--dry-run`): what serves and what will, one operation a line."""
        if self.refused:
            return f"refused: {self.refused}"
        leaving = f"; leaving: {', '.join(self.leaving)}" if self.leaving else ""
        lines = [f"plan: {_named(self.before)} -> {_named(self.after)} ({self.mode}{leaving})"]
        lines += [f"  {self.alone} serves alone afterwards (a plain switch)"] if self.alone else []
        lines += [f"  {n}. {type(op).__name__}: {op.describe()}" for n, op in enumerate(self.ops, 1)]
        lines += [f"  keep {name}: serves throughout" for name in self.keep]
        if self.rollback:
            undo = "; ".join(
                i.describe() for op in self.ops for i in op.inverse() if isinstance(op, ops.Stop)
            )
            lines.append(f"  rollback: {self.rollback.variant}: {undo}")
        lines += [f"  note: {note}" for note in self.notes]
        if self.capacity.get("line"):
            lines.append(f"  capacity: {self.capacity['line']}")
        if self.no_op:
            lines.append(f"  nothing to change: {_named(self.after)} already serves with this configuration")
        return "\n".join(lines)

    def event(
        self,
        outcome: str,
        result: UpResult,
        *,
        kind: str = "up",
        cause: BaseException | str | None = None,
        ran: Sequence[Op] = (),
        by: str | None = None,
    ) -> dict[str, object]:
        """The change's history line, for every plan (`kind`: `up`, `live`, `down`): what served
        and what is wanted, the outcome, the operations in words (those that `ran`, else every
        planned one), timings, what the drain did and the first line of a failure's `cause`."""
        extra = {"by": by, "port_gap": result.port_gap, "probation": result.probation}
        extra["serving_container"] = None if cause else result.serving_container
        return {
            "kind": kind,
            "source": "+".join(sorted({name.split("/")[0] for name in self.before})) or None,
            "target": self.target or None,
            "outcome": outcome,
            "steps": [op.describe() for op in (ran or self.ops)],
            "timings": {k: round(v, 3) for k, v in result.timings.items()},
            "drained": result.drained,
            "cause": str(cause).splitlines()[0][:500] if cause else None,
            **{key: value for key, value in extra.items() if value},
        }

    def recording(self, project: str, timeout: float, kind: str = "up") -> SwapRecord:
        """The running change's record (`status` names it; a killed `up` leaves it behind, and
        the next `status` or `up` turns it into an interrupted history event)."""
        steps = [op.describe() for op in self.ops]  # the operations in words, for every plan
        return SwapRecord(
            project, {"serving": self.serving, "target": self.target, "kind": kind, "steps": steps}, timeout
        )


def _named(names: Sequence[str]) -> str:
    return f"{{{', '.join(names)}}}" if names else "nothing"


IDLE = "neither serving nor wanted asleep"
"""Why a plan removes a container before anything else (a removing `Stop`'s cause)."""

STEPS: dict[tuple[type[Op], str], str] = {
    (ops.Stop, "sleep"): "sleep",
    (ops.Stop, "stop"): "stop",
    (ops.AwaitRelease, ""): "release",
    (ops.Start, "wake"): "wake",
    (ops.Start, "adopt"): "adopt",
    (ops.Route, ""): "route",
    (ops.Start, "start"): "start",
    (ops.Gate, ""): "gate",
}
"""The operations that are the swap's steps, in words (`steps` in the plan's JSON and the history)."""

WAKE_SETTLE_SHARE = 0.25
"""After a wake the process did not restart (no load, no engine start to fail late): the
settle watch is a quarter of the stack's, counted from the wake call, and the wake checks
and the warm-up run beside it (clients wait until both are over)."""


def rollback_source_problem(rollback: Rollback | None) -> str | None:
    """Why the run file a rollback would start the serving variant from cannot be used (None:
    it can, there is none, or the rollback wakes a sleeper); checked before anything stops."""
    if rollback is None or rollback.how != "start" or not rollback.config_file:
        return None
    import yaml

    from composer.stack.bounded import RUN_FILE_LIMIT, FileTooLarge, read_bounded

    path = Path(rollback.config_file)
    what = f"the run file {path} that {rollback.variant} (serving now) would be started from on a rollback"
    try:
        data = yaml.load(read_bounded(path, "run file", RUN_FILE_LIMIT), Loader=yaml.SafeLoader)
    except FileNotFoundError:
        return None
    except FileTooLarge as err:
        return str(err)
    except OSError as err:
        return f"cannot read {what}: {err.strerror or err}"
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return f"{what} is not valid YAML{where}"
    services = data.get("services") if isinstance(data, dict) else None
    service = services.get(rollback.service) if isinstance(services, dict) and rollback.service else None
    if not isinstance(service, dict) or not isinstance(service.get("image"), str):
        return f"{what} has no service {rollback.service!r} with an image"
    return None


def _member(info: RunningVariant, bring: Bring, source: tuple[str, str] | None = None) -> Member:
    """A running container as the operations carry it (`source`: its run file and service)."""
    run_file, service = source or (info.config_file or "", info.service or bring.shared_service)
    speculative = info.variant == bring.member.variant and bring.member.speculative  # the target's sleeper
    return Member(info.variant, info.variant, info.name, service, run_file, bring.gpus, speculative)


def plan_swap(
    target: str,
    target_hash: str,
    current: RunningVariant | None,
    current_ready: bool,
    *,
    current_sleeps: bool = False,
    target_asleep: RunningVariant | bool | None = False,
    bring: Bring | None = None,
) -> Plan:
    """The operations from what runs now (pure). `current_sleeps`: the serving variant is put
    to sleep, not stopped; `target_asleep`: the target's sleeper to wake, not start."""
    if current and current.variant == target and current.config_hash == target_hash and current_ready:
        return Plan((current.variant,), (target,))
    bring = bring or Bring(Member(target, target, target, "vllm", ""))
    todo: list[Op] = []
    if current:
        previous = _member(current, bring, bring.source)
        if current_sleeps and current.variant != target:
            todo.append(ops.Stop(previous, "sleep", settle=bring.settle))
        else:
            todo += [ops.Stop(previous, settle=bring.settle), ops.AwaitRelease(bring.gpus)]
    if target_asleep:
        sleeper = target_asleep if isinstance(target_asleep, RunningVariant) else None
        todo += _bring_in(ops.Start(_member(sleeper, bring) if sleeper else bring.member, "wake"), bring)
    else:
        todo += _bring_in(ops.Start(bring.member, first=current is None), bring)
    return Plan((current.variant,) if current else (), (target,), tuple(todo))


def _bring_in(brought: ops.Start | ops.Route, bring: Bring) -> list[Op]:
    """The operation that brings the target in, then its gate and settle watch (the wake
    checks and the warm-up beside it) and, with clients served, its probation."""
    member = brought.member
    woke = brought.how == "wake"
    since = {"wake": "wake", "start": "ready"}.get(brought.how, "process")
    acceptance = woke and member.speculative
    warmup = bring.warmup if bring.gateway else 0
    if acceptance:
        warmup = max(0, warmup - ACCEPTANCE_WARMUP_REQUESTS)
    seconds = bring.settle * (WAKE_SETTLE_SHARE if woke else 1.0)
    todo: list[Op] = [brought, ops.Gate(member), ops.Settle(member, seconds, since, woke, warmup, acceptance)]
    return todo + ([ops.Probation(member, bring.probation)] if bring.probation > 0 else [])


def stop_instead(plan: Plan, gpus: str) -> Plan:
    """The plan with the serving variant stopped (its GPUs released) instead of put to sleep."""
    todo: list[Op] = []
    for op in plan.ops:
        todo += (
            [ops.Stop(op.member, settle=op.settle), ops.AwaitRelease(gpus)]
            if isinstance(op, ops.Stop) and op.how == "sleep"
            else [op]
        )
    return replace(plan, ops=tuple(todo))


def with_gateway(
    plan: Plan,
    gateway: GatewayChange,
    bring: Bring,
    gateway_running: bool,
    current: RunningVariant | None = None,
) -> Plan:
    """The gateway's update, then the hold and drain, around the operations; the release after
    the gate (`current`: the serving variant's container, which a new gateway routes to)."""
    if not bring.gateway:
        return plan
    first: list[Op] = []
    if gateway.recreate:
        first.append(ops.UpdateGateway("replace", bring.member.run_file, gateway.recreate))
    elif gateway.in_place:
        first.append(ops.UpdateGateway("in place", settings=gateway.settings, keys=gateway.keys()))
    if not plan.ops:
        if not gateway.recreate:
            return replace(plan, ops=tuple(first))
        serving = _member(current, bring) if current is not None else None
        todo = (*first, ops.Hold(plan.target, serving=serving), ops.Release(plan.target, tell=True))
        return replace(plan, ops=todo)
    ensure = "" if gateway.recreate or gateway_running else bring.member.run_file
    sleeping = next((op.member for op in plan.ops if isinstance(op, ops.Stop) and op.how == "sleep"), None)
    hold = ops.Hold(plan.target, ensure, not gateway_running, sleeping if gateway.recreate else None)
    probation = [op for op in plan.ops if isinstance(op, ops.Probation)]
    swap = [op for op in plan.ops if not isinstance(op, ops.Probation)]
    back = plan.serving or ""
    release = ops.Release(plan.target, tell=bool(gateway.recreate), back=back)
    return replace(plan, ops=(*first, hold, *swap, release, *probation))


def decide(
    snapshot: Snapshot,
    target: str,
    target_hash: str,
    *,
    target_sleeps: bool,
    sleeps_in_stack: dict[str, bool],
    current_ready: bool,
    gateway: GatewayChange | None = None,
    owner: Owner | None = None,
    takeover: bool = False,
    force_recreate: bool = False,
    bring: Bring | None = None,
) -> Plan:
    """The whole plan from one snapshot (pure). `target_sleeps`: the target runs with sleep
    standby; `sleeps_in_stack`: per variant, whether the stack puts it to sleep. `owner`: this
    stack; another's running container is refused (`refused`), or with `takeover` replaced.
    `force_recreate`: a target that serves unchanged is restarted all the same."""
    bring = bring or Bring(Member(target, target, target, "vllm", ""))
    gateway = gateway or GatewayChange()
    notes: list[str] = []
    serving = snapshot.serving
    current = serving.info if serving else None
    route_ok = snapshot.route_ok is not False
    foreign = snapshot_foreign(snapshot, owner)
    if foreign and not takeover:
        before = (current.variant,) if current else ()
        return Plan(before, (target,), refused=takeover_refusal(foreign, snapshot.project))
    notes += takeover_notes(foreign, snapshot.project)
    same = current is not None and current.variant == target and current.config_hash == target_hash
    ready = same and current_ready and route_ok and not foreign and not force_recreate
    if same and force_recreate:
        notes.append(f"--force-recreate: {target} is restarted with the gateway holding requests")
    current_sleeps = False
    if current is not None and current.variant != target and sleeps_in_stack.get(current.variant, False):
        if current.sleep_mode:
            current_sleeps = True
        else:
            notes.append(
                f"{current.variant} was started without sleep mode: it is stopped, not put to sleep "
                "(it sleeps after its next start)"
            )
    sleeper = next((m for m in snapshot.asleep if m.variant == target), None)
    wakeable = sleeper is not None and sleeper.info.config_hash == target_hash and target_sleeps
    stop_first: list[Op] = []
    adopt = None
    for member in snapshot.awake_idle:
        if (
            member.variant == target
            and member.info.config_hash == target_hash
            and target_sleeps
            and not adopt
        ):
            adopt = member
            continue
        stop_first.append(ops.Stop(_member(member.info, bring), "remove", cause=IDLE))
        notes.append(f"{member.variant} ({member.info.name}) runs awake without serving: it is stopped")
    for member in snapshot.asleep:
        stale_target = member.variant == target and not wakeable
        if stale_target or not sleeps_in_stack.get(member.variant, False):
            why = "its configuration changed" if stale_target else "this stack no longer puts it to sleep"
            stop_first.append(ops.Stop(_member(member.info, bring), "remove", cause=IDLE))
            notes.append(f"{member.variant}'s sleeping container is stopped: {why}")
    asleep = sleeper.info if wakeable and sleeper is not None else False
    base = plan_swap(
        target, target_hash, current, ready, current_sleeps=current_sleeps, target_asleep=asleep, bring=bring
    )
    todo = list(base.ops)
    if adopt is not None and todo:
        todo = [op for op in todo if not isinstance(op, ops.Start)]
        at = next(i for i, op in enumerate(todo) if isinstance(op, ops.Gate))
        todo[at:] = _bring_in(ops.Start(_member(adopt.info, bring), "adopt"), bring)
        notes.append(f"{target}'s container {adopt.info.name} runs awake: it serves again without a restart")
    if same and todo and not route_ok and current is not None:
        todo = _bring_in(ops.Route(_member(current, bring)), bring)
        notes.append(f"the gateway does not forward to {target}'s container: it is routed again")
    if todo and current is not None:  # exited containers of the shared service go with the serving one
        gone = [m.info.name for m in snapshot.members if not m.running and not m.asleep and m is not serving]
        todo = [
            replace(op, also=tuple(gone)) if isinstance(op, ops.Stop) and op.how == "stop" and gone else op
            for op in todo
        ]
    todo[:0] = stop_first
    plan = replace(base, ops=tuple(todo), notes=tuple(notes))
    return with_gateway(plan, gateway, bring, snapshot.gateway_running, current)


def plan_live(
    target: LiveTarget,
    running: Sequence[LiveRunning],
    single: RunningVariant | None = None,
    gateway_running: bool = True,
    gpus_shared: bool = False,
    owner: Owner | None = None,
    takeover: bool = False,
    *,
    speculative: Collection[str] = (),
    run_file: str = "",
    continue_streams: bool = True,
    idle: Sequence[Member] = (),
    gateway: GatewayChange | None = None,
) -> Plan:
    """Decide the change (pure): keep what runs with the same configuration, start what is new,
    restart what changed, stop what leaves. `gpus_shared`: the one serving (non-live)
    container's GPUs overlap the set's, so it stops first. Another stack's container (per
    `owner`) is refused, or with `takeover` restarted. `speculative`: the variants whose gate
    checks acceptance; `run_file`: where new members start from; `continue_streams` (no
    `up --drain`): a leaving member's streams go on on the others. `idle`: containers that
    serve nothing (a failed change's, left with --no-rollback), removed first, as are
    members that no longer run and are not wanted. `gateway`: its live settings that changed,
    applied in place first (as a switch applies them)."""
    wanted = {s.name: s for s in target.services}
    now = {r.name: r for r in running if r.status == "running"}
    idle = (*idle, *(r.member() for r in running if r.status != "running" and r.name not in wanted))
    if single is not None and single.name in {r.container for r in now.values()}:
        single = None  # already a member (the snapshot names it)
    found = [(r.name, r.container, r.owner) for r in now.values()]
    if single is not None:
        found.append((single.variant, single.name, single.owner))
    foreign = foreign_members(owner, found)
    project = target.services[0].spec.project if target.services else ""
    before = tuple(sorted({*now, *([single.variant] if single is not None else [])}))
    if foreign and not takeover:
        return Plan(before, tuple(wanted), refused=takeover_refusal(foreign, project))
    taken = {f.variant for f in foreign}

    def current(name: str, config_hash: str) -> bool:
        return config_hash in {wanted[name].spec.hash, wanted[name].alone_hash} - {""}

    def member(name: str, variant: str, container: str, service: str, file: str, gpus: str) -> Member:
        return Member(name, variant, container, service, file, gpus, variant in speculative)

    new = {
        n: member(
            n, s.member.variant, s.spec.container_name, s.spec.compose_service, run_file, s.member.gpus_text
        )
        for n, s in wanted.items()
    }
    old = {n: r.member(r.variant in speculative) for n, r in now.items()}
    alone = adopt = None
    if single is not None:
        file = (single.config_file or "").split(",")[0]
        joins = f"{single.variant}/1"
        others = [n for n in wanted if n != joins]
        if gateway_running and joins in wanted and current(joins, single.config_hash) and others and not now:
            # the lone serving container runs what the member would: it joins as it runs
            adopt = member(
                joins, single.variant, single.name, single.service or "", file, wanted[joins].member.gpus_text
            )
            single = None
        else:
            gpus = "all" if gpus_shared else "-"
            alone = member(single.variant, single.variant, single.name, single.service or "", file, gpus)
    adopted = {adopt.name: adopt} if adopt else {}
    keep = tuple(
        n for n in wanted if n in adopted or (n in now and current(n, now[n].config_hash) and n not in taken)
    )
    planned = live_operations(
        new,
        old,
        keep,
        alone,
        run_file=run_file,
        adopt=adopt,
        alone_first=gpus_shared,
        start_gateway=target.gateway is not None and not gateway_running,
        continue_streams=continue_streams,
    )
    first: list[Op] = (
        [ops.UpdateGateway("in place", settings=gateway.settings, keys=gateway.keys())]
        if gateway and gateway.in_place
        else []
    )
    first += [ops.Stop(m, "remove", cause=IDLE) for m in idle]
    before = tuple(sorted({*now, *adopted, *([single.variant] if single is not None else [])}))
    return Plan(before, tuple(wanted), (*first, *planned), tuple(takeover_notes(foreign, project)))


def _overlap(a: str, b: str) -> bool:
    """Two GPU sets as labels write them (`0,1`, `all`, `-`) share a GPU."""
    if "-" in (a, b) or not a or not b:
        return False
    return "all" in (a, b) or bool(set(a.split(",")) & set(b.split(",")))


def live_operations(
    new: Mapping[str, Member],
    old: Mapping[str, Member],
    keep: Collection[str],
    alone: Member | None,
    *,
    run_file: str = "",
    adopt: Member | None = None,
    alone_first: bool = False,
    start_gateway: bool = False,
    continue_streams: bool = True,
    in_place: bool = False,
) -> tuple[Op, ...]:
    """The operations that make the set `new` of the members `old` (and `adopt`) that run now,
    keeping `keep` as they run, in order (Docker and Kubernetes alike): a leaving member whose
    GPUs a new one needs leaves before it starts, the others after every new member serves;
    each new member is started, gated, then published. A changed member is drained, then
    started again (`in_place`, a Deployment: applied in place). The one serving container
    (`alone`) that does not join is drained once the set takes the new requests, then stopped
    (`alone_first`: its GPUs are needed, so it stops first, the gateway holding meanwhile)."""
    now = {*old, *([adopt.name] if adopt else [])}
    starting = [n for n in new if n not in now]
    stopping = sorted(n for n in now if n not in new)
    replacing = [n for n in new if n in now and n not in keep]
    todo: list[Op] = [ops.UpdateGateway("start", run_file)] if start_gateway else []
    todo += [ops.Start(adopt, "adopt", live=True)] if adopt else []
    serving = [m.upstream() for m in old.values()]  # what the gateway routes among now
    held = False

    def hold() -> None:
        """Before the last container that serves stops: the gateway holds new requests and
        drains (or continues) those in flight, until the next member is published."""
        nonlocal held
        if not held and not start_gateway:  # a gateway started now serves nothing yet
            todo.append(ops.Hold("", continue_streams=continue_streams))
            held = True

    def publish(upstreams: list[dict[str, str]]) -> None:
        nonlocal serving, held
        if upstreams != serving:
            todo.append(ops.Publish(tuple(upstreams), tuple(serving)))
            serving = upstreams
        if held:  # a member serves again: the held requests go to the set
            todo.append(ops.Release(""))
            held = False

    def leave(member: Member, stop: bool = True) -> None:
        rest = [u for u in serving if u["name"] != member.name]
        if rest:
            publish(rest)
            todo.append(ops.Drain(member.name, continue_streams))
        elif stop:  # the last one serving: held and drained first
            hold()
        todo.extend([ops.Stop(member, live=True)] if stop else [])

    if alone is not None and alone_first:
        hold()
        todo.append(ops.Stop(alone, live=True))
    early = [n for n in stopping if any(_overlap(old[n].gpus, new[s].gpus) for s in starting)]
    for name in early:
        leave(old[name])
    for name in (*replacing, *starting):
        rolled = in_place and name in replacing
        if name in replacing:
            leave(old[name], stop=not rolled)
        freed = [op.member.gpus for op in todo if isinstance(op, ops.Stop)]
        if any(_overlap(gpus, new[name].gpus) for gpus in freed):
            todo.append(ops.AwaitRelease(new[name].gpus))
        todo.append(ops.Reapply(new[name]) if rolled else ops.Start(new[name], live=True))
        todo.append(ops.Gate(new[name], live=True))
        adopted = [adopt.upstream()] if adopt and not serving else []  # routed with the first new member
        publish([*adopted, *(u for u in serving if u["name"] != name), new[name].upstream()])
    if alone is not None and not alone_first:
        if serving and not any(isinstance(op, ops.Publish) for op in todo):  # a set that already ran
            todo.append(ops.Publish(tuple(serving), ()))
        todo += [ops.Drain(alone.container, False, live=False)] if serving else []
        todo.append(ops.Stop(alone, live=True))
    for name in stopping:
        if name not in early:
            leave(old[name])
    return (*todo, *([ops.Release("")] if held else []))


def plan_alone(
    alone: Member,
    alone_hash: str,
    running: Sequence[LiveRunning],
    project: str,
    *,
    gateway_running: bool = True,
    gateway_file: str | None = None,
    owner: Owner | None = None,
    takeover: bool = False,
    continue_streams: bool = True,
) -> Plan:
    """`up X` on a running live set (pure; Docker and Kubernetes): X's one serving container
    (`alone`, from its run file) is started and gated, the gateway goes back to its single
    upstream (`Publish((), ...)`), then each member is drained and stopped; one whose GPUs or
    service X needs goes first (X then waits for the release). A member that is X's container
    already (adopted) serves on. Last, the gateway is replaced from `gateway_file` (X's run
    file when None): its settings named the members."""
    now = {r.name: r for r in running if r.status == "running"}
    foreign = foreign_members(owner, [(r.name, r.container, r.owner) for r in now.values()])
    if foreign and not takeover:
        return Plan(tuple(sorted(now)), (alone.variant,), refused=takeover_refusal(foreign, project))
    taken = {f.container for f in foreign}
    old = {n: r.member() for n, r in now.items()}
    same = (alone.container, alone.variant, alone_hash)  # X's container runs X already (adopted)
    kept = next((n for n, r in now.items() if (r.container, r.variant, r.config_hash) == same), None)
    kept = kept if kept is None or now[kept].container not in taken else None
    leaving = [n for n in old if n != kept]
    early = [n for n in leaving if old[n].service == alone.service or _overlap(old[n].gpus, alone.gpus)]
    gateway_file = gateway_file or alone.run_file
    todo: list[Op] = [] if gateway_running else [ops.UpdateGateway("start", gateway_file)]
    serving = [m.upstream() for m in old.values()]
    held = False
    for name in early:
        rest = [u for u in serving if u["name"] != name]
        if rest:
            todo += [ops.Publish(tuple(rest), tuple(serving)), ops.Drain(name, continue_streams)]
            serving = rest
        elif gateway_running:  # the last one serving: the gateway holds (and drains) until X serves
            todo.append(ops.Hold(alone.variant, continue_streams=continue_streams))
            held = True
        todo.append(ops.Stop(old[name], live=True))
    if kept is None:
        freed = any(_overlap(old[n].gpus, alone.gpus) for n in early)
        todo += [ops.AwaitRelease(alone.gpus)] if freed else []
        todo += [ops.Start(alone, live=True), ops.Gate(alone, live=True)]
    todo.append(ops.Publish((), tuple(serving), alone.variant))
    todo += [ops.Release(alone.variant)] if held else []
    for name in leaving:
        if name not in early:
            todo += [ops.Drain(name, continue_streams), ops.Stop(old[name], live=True)]
    if gateway_running:  # its settings list the members: a restart would route to them again
        why = "the live set left: its settings name no member"
        todo.append(ops.UpdateGateway("replace", gateway_file, why))
    notes = tuple(takeover_notes(foreign, project))
    return Plan(tuple(sorted(now)), (kept,) if kept else (alone.variant,), tuple(todo), notes)
