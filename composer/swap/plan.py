"""The swap plan: every decision of a swap, made from one snapshot before anything stops (pure).

`decide()` reads a `Snapshot` and the target and returns a `SwapPlan`: the steps in order,
the variant that serves now and exactly where a rollback brings it back from (its
container to wake, or the run file and compose service that created it), what else must
stop first (awake containers that neither serve nor sleep, sleepers the stack no longer
wants), and notes a user must read (a serving container that cannot sleep is stopped
cold). `compose-spec up VARIANT --dry-run` prints it; `as_data()` is its JSON. The plan names
every container its steps touch (the sleeper it wakes, the rollback's source), so the
steps act on those names and never search the snapshot for the variant again.

Steps: `sleep` (the serving container was started with sleep mode and its variant sleeps
in this stack), `stop` + `release` (stop it and wait for its GPU memory), `wake` (the
target sleeps with the same configuration), `adopt` (the target's container runs awake
but does not serve: route to it), `start` (compose up from the run file), `gate`.
`rollback_source_problem` (the one function here that reads a file) checks, before anything
stops, that the run file a rollback would start the serving variant from is readable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from composer.engine.containers import RunningVariant
from composer.render.spec import Owner

if TYPE_CHECKING:
    from composer.swap.snapshot import Snapshot


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
    """Where the variant that serves now comes back from if the swap fails."""

    variant: str
    how: str  # "wake" (its sleeping container) or "start" (the file that created it)
    container: str
    config_file: str | None = None
    service: str | None = None


@dataclass(frozen=True)
class SwapPlan:
    """The steps a swap will take; empty when the target already serves."""

    target: str
    target_hash: str
    previous: RunningVariant | None
    steps: tuple[str, ...]
    rollback: Rollback | None = None
    stop_first: tuple[str, ...] = ()  # container names stopped before the swap's own steps
    notes: tuple[str, ...] = field(default=())
    gateway_update: bool = False  # drain the gateway, replace its container (new settings), release
    gateway: GatewayChange = field(default_factory=GatewayChange)  # why recreated, or settings in place
    capacity: dict[str, object] = field(default_factory=dict)  # composer.capacity's figures for it
    wake: str | None = None  # the sleeping container the `wake` step wakes (by name)
    refused: str = ""  # why up changes nothing: another stack started what runs (no --takeover)

    @property
    def no_op(self) -> bool:
        return not self.steps and not self.gateway_update and not self.gateway.changed

    @property
    def mode(self) -> str:
        """As a live plan says it: `replace` (the serving variant leaves), `join`, `unchanged`, `refused`."""
        if self.no_op or self.refused:
            return "refused" if self.refused else "unchanged"
        return "replace" if self.previous is not None and self.previous.variant != self.target else "join"

    def as_data(self) -> dict[str, object]:
        """The plan as JSON-ready data (no secrets: names, steps and files only)."""
        return {
            "target": self.target,
            "target_hash": self.target_hash,
            "serving": self.previous.variant if self.previous else None,
            "steps": list(self.steps),
            "stop_first": list(self.stop_first),
            "rollback": self.rollback.__dict__ if self.rollback else None,
            "notes": list(self.notes),
            "gateway_update": self.gateway_update,
            "gateway_in_place": list(self.gateway.changed) if self.gateway.in_place else [],
            "gateway_recreate_because": self.gateway.recreate or None,
            "capacity": self.capacity or None,
            "wake": self.wake,
            "refused": self.refused or None,
            "mode": self.mode,
        }

    def describe(self) -> str:
        """The plan as text, one line per fact."""
        why = f" ({self.gateway.recreate})" if self.gateway.recreate else ""
        gateway = (
            f"the gateway is replaced by a new container{why}: start the new one with its new settings "
            "beside the old one, which then finishes its requests and stops (`up` measures the "
            "published port meanwhile), release"
        )
        if not self.gateway_update and self.gateway.in_place:
            gateway = (
                f"apply the gateway's changed settings in place ({self.gateway.keys()}): "
                "same container, nothing drained"
            )
        if self.refused:
            return f"refused: {self.refused}"
        if not self.steps:
            if self.gateway_update or self.gateway.changed:
                return f"plan: {self.target} keeps serving; {gateway}"
            return f"{self.target} already serves with the same configuration: nothing to do"
        before = self.previous.variant if self.previous else "nothing"
        leaves = f": {before} leaves" if self.mode == "replace" else ""
        lines = [f"plan: {before} -> {self.target} ({self.mode}{leaves})"]
        if self.gateway_update or self.gateway.changed:
            lines.append(f"first: {gateway}")
        lines.append("steps: " + " -> ".join(self.steps))
        if self.wake and "wake" in self.steps:
            lines.append(f"wakes: {self.wake}")
        if self.stop_first:
            lines.append("stops first: " + ", ".join(self.stop_first))
        if self.rollback:
            source = (
                f"wake its sleeping container {self.rollback.container}"
                if self.rollback.how == "wake"
                else f"start it from {self.rollback.config_file} (service {self.rollback.service})"
            )
            lines.append(f"rollback: {self.rollback.variant}: {source}")
        lines += [f"note: {note}" for note in self.notes]
        if self.capacity.get("line"):
            lines.append(f"capacity: {self.capacity['line']}")
        return "\n".join(lines)


def rollback_source_problem(rollback: Rollback | None) -> str | None:
    """Why the run file a rollback would start the serving variant from cannot be used; None
    when it can, when there is none (the rollback renders it again from the stack), or when
    the rollback wakes a sleeping container. Checked before anything stops: a rollback that
    fails on its own file leaves nothing serving."""
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


def plan_swap(
    target: str,
    target_hash: str,
    current: RunningVariant | None,
    current_ready: bool,
    *,
    current_sleeps: bool = False,
    target_asleep: bool = False,
) -> SwapPlan:
    """Decide the steps from what runs now (pure).

    `current_sleeps`: the serving variant is put to sleep, not stopped; `target_asleep`:
    the target sleeps with the same configuration (woken, not started).
    """
    if current and current.variant == target and current.config_hash == target_hash and current_ready:
        return SwapPlan(target, target_hash, current, ())
    steps: tuple[str, ...] = ()
    if current:
        steps = ("sleep",) if current_sleeps and current.variant != target else ("stop", "release")
    steps += ("wake", "gate") if target_asleep else ("start", "gate")
    return SwapPlan(target, target_hash, current, steps)


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
) -> SwapPlan:
    """The whole plan from one snapshot (pure).

    `target_sleeps`: the target runs with sleep standby in this stack; `sleeps_in_stack`:
    per variant, whether the stack puts it to sleep (a variant the stack no longer has
    counts as not). `owner`: this stack, as containers record it; a running container that
    records another is refused (`refused`), or with `takeover` replaced (restarted).
    `force_recreate`: a target that serves unchanged is restarted all the same.
    """
    notes: list[str] = []
    serving = snapshot.serving
    current = serving.info if serving else None
    route_ok = snapshot.route_ok is not False
    foreign = snapshot_foreign(snapshot, owner)
    if foreign and not takeover:
        return SwapPlan(target, target_hash, current, (), refused=takeover_refusal(foreign, snapshot.project))
    notes += takeover_notes(foreign, snapshot.project)
    if current is not None and current.variant == target and current.config_hash == target_hash:
        ready = current_ready and route_ok and not foreign and not force_recreate
        if force_recreate:
            notes.append(f"--force-recreate: {target} is restarted with the gateway holding requests")
    else:
        ready = False
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
    stop_first = []
    adopt = None
    for member in snapshot.awake_idle:
        if (
            member.variant == target
            and member.info.config_hash == target_hash
            and target_sleeps
            and adopt is None
        ):
            adopt = member
            continue
        stop_first.append(member.info.name)
        notes.append(f"{member.variant} ({member.info.name}) runs awake without serving: it is stopped")
    for member in snapshot.asleep:
        stale_target = member.variant == target and not wakeable
        if stale_target or not sleeps_in_stack.get(member.variant, False):
            stop_first.append(member.info.name)
            why = "its configuration changed" if stale_target else "this stack no longer puts it to sleep"
            notes.append(f"{member.variant}'s sleeping container is stopped: {why}")
    base = plan_swap(
        target, target_hash, current, ready, current_sleeps=current_sleeps, target_asleep=wakeable
    )
    steps = base.steps
    if adopt is not None and steps:
        steps = tuple(s for s in steps if s not in ("start", "wake"))
        steps = (*steps[: steps.index("gate")], "adopt", "gate")
        notes.append(f"{target}'s container {adopt.info.name} runs awake: it serves again without a restart")
    same = current is not None and current.variant == target and current.config_hash == target_hash
    if same and steps and not route_ok:
        steps = ("route", "gate")
        notes.append(f"the gateway does not forward to {target}'s container: it is routed again")
    rollback = None
    if current is not None and current.variant != target:
        rollback = (
            Rollback(current.variant, "wake", current.name)
            if current_sleeps
            else Rollback(current.variant, "start", current.name, current.config_file, current.service)
        )
    elif current is not None and steps and "stop" in steps:
        rollback = Rollback(current.variant, "start", current.name, current.config_file, current.service)
    return SwapPlan(
        target,
        target_hash,
        current,
        steps,
        rollback,
        tuple(stop_first),
        tuple(notes),
        bool(gateway and gateway.recreate),
        gateway or GatewayChange(),
        wake=sleeper.info.name if sleeper is not None and "wake" in steps else None,
    )
