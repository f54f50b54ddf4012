"""`down` and `down VARIANT`: stop the project, or one variant's container, under the lock; each
goes to the swap history. `down` keeps the project's named volumes unless `--volumes`.

`down` is planned from one snapshot (`plan_down`, pure, printed by `--dry-run` as `up`'s plans
are): hold new requests at the gateway and drain those in flight (up to the drain timeout:
nothing continues, since nothing serves afterwards; what still runs then is cut and counted),
stop each variant container (named once, by its live member name or its variant), then
`compose down` the gateway, its port holder and the network. A project another stack started
(its labels say so) is refused, as `up` refuses it, unless `--takeover`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from docker.errors import APIError, NotFound

from composer import labels as label_names
from composer.engine.client import compose
from composer.errors import ComposerError, DownRefused, GatewayControlError, SwapFailed, UsageError
from composer.stack.model import Stack
from composer.swap import ops, runner
from composer.swap.entry import run_live
from composer.swap.execute import Cases, Handlers, Say, quiet
from composer.swap.holding import SwapHold, start_hold
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.owner import down_refusal, foreign_running
from composer.swap.plan import Plan
from composer.swap.probation import change_lock
from composer.swap.runner import Change
from composer.swap.snapshot import Snapshot, take
from composer.swap.transaction import Context, stop_container

if TYPE_CHECKING:
    import docker
    from docker.models.volumes import Volume

    from composer.swap.journal import SwapRecord


@dataclass(frozen=True)
class StopProject(ops.Op):
    """`compose down` of the project: the gateway, its port holder, the network and whatever
    container is left; `volumes`: the project's named volumes, removed when `remove`."""

    STAGE = "stopping"
    project: str
    volumes: tuple[str, ...] = ()
    remove: bool = False

    def describe(self) -> str:
        said = f"remove the gateway, its port holder and the network of project {self.project} (compose down)"
        if not self.volumes:
            return said
        return f"{said}; {'remove' if self.remove else 'keep'} volume(s) {', '.join(self.volumes)}"


def running_members(snap: Snapshot) -> list[ops.Member]:
    """Every running variant container once: a live member by its member name (`mtp/1`), any
    other (serving, asleep or awake) by its variant."""
    found = [r.member() for r in snap.live_running]
    seen = {r.container for r in snap.live_running}
    for m in snap.members:
        if m.running and m.info.name not in seen:
            found.append(ops.Member(m.variant, m.variant, m.info.name, m.info.service or "", ""))
    return found


def plan_down(
    snap: Snapshot,
    stack: Stack,
    drain_timeout: float,
    volumes: tuple[str, ...] = (),
    remove_volumes: bool = False,
    takeover: bool = False,
) -> Plan:
    """`down`'s plan (pure): refused when another stack started what runs (unless `takeover`)."""
    members = running_members(snap)
    names = tuple(m.name for m in members)
    foreign = foreign_running(snap, stack)
    if foreign and not takeover:
        command = "down --volumes" if remove_volumes else "down"
        return Plan(names, (), refused=down_refusal(foreign, stack.project, command))
    todo: list[ops.Op] = []
    notes = [f"takes over: {f.describe(stack.project)}" for f in foreign]
    if members and snap.gateway_running:
        todo.append(ops.Hold("nothing"))
        notes.append(
            f"the drain waits up to {drain_timeout:g}s (-t/--timeout, else gateway.drain_timeout); nothing "
            "serves afterwards, so no stream continues: what is still in flight then is cut and counted"
        )
    elif members:
        notes.append("no gateway runs: requests in flight cannot be drained or counted")
    live = {r.container for r in snap.live_running}
    todo += [ops.Stop(m, live=m.container in live) for m in members]
    todo.append(StopProject(stack.project, volumes, remove_volumes))
    return Plan(names, (), tuple(todo), tuple(notes))


class Downer:
    """`down`'s engine (`composer.swap.runner`): hold and drain at the gateway, stop, compose down;
    nothing is undone (what stopped stays stopped)."""

    def __init__(self, ctx: Context, snap: Snapshot, drain_timeout: float) -> None:
        self.ctx, self.snap, self.drain_timeout = ctx, snap, drain_timeout
        self.hold_set: SwapHold | None = None
        self.drained: dict[str, int] | None = None
        self.warnings: list[str] = []
        self.timings: dict[str, float] = {}
        self.record: SwapRecord | None = None

    def handlers(self) -> Handlers:
        return {ops.Hold: self.hold, ops.Stop: Cases({"stop": self.stop}), StopProject: self.stop_project}

    def hold(self, op: ops.Hold) -> None:
        """Hold new requests and drain those in flight; what runs at the timeout is cut (counted)."""
        ctx, began = self.ctx, time.monotonic()
        try:
            self.hold_set = start_hold(
                ctx.stack,
                ctx.client,
                self.drain_timeout,
                ctx.say,
                container=self.snap.gateway,
                waiting=ctx.waiting,
            )
            done = self.hold_set.begin(continue_streams=False, gateway_leaving=True)
        except (SwapFailed, GatewayControlError) as err:
            first = str(err).splitlines()[0]
            self.warnings.append(f"the gateway did not drain ({first}): requests in flight were not counted")
            return
        self.timings["drain"] = time.monotonic() - began
        self.drained = {"finished": done.drained, "cut": done.cut}

    def stop(self, op: ops.Stop) -> None:
        stop_container(self.ctx, op.member.name, op.member.container)

    def stop_project(self, op: StopProject) -> None:
        self.release()
        compose(op.project, None, ["down", "--remove-orphans"], timeout=120)
        for volume in project_volumes(self.ctx.stack, self.ctx.client) if op.remove else ():
            self.ctx.say(f"removing volume {volume.name}")
            try:
                volume.remove()
            except NotFound:  # gone meanwhile
                continue
            except APIError as err:
                raise ComposerError(
                    f"volume {volume.name} could not be removed: {err.explanation or err}"
                ) from err

    def release(self, serving: str | None = None) -> None:
        """End the hold (the requests that came meanwhile find nothing serving: 503 after hold_timeout)."""
        if self.hold_set is not None:
            note = self.hold_set.end(serving=serving)
            self.hold_set = None
            if note:
                self.warnings.append(note)

    def failed(self, plan: Plan, op: ops.Op, err: BaseException) -> None:
        return None

    def explain(self, plan: Plan, err: BaseException, ran: list[ops.Op], undone: object) -> SwapFailed:
        """A failed `down`: what failed and why; what stopped stays stopped, `down` again goes on."""
        why = "interrupted" if isinstance(err, KeyboardInterrupt) else str(err).splitlines()[0]
        what = ran[-1].describe() if ran else "down"
        again = "what stopped stays stopped: `compose-spec down` again goes on"
        return SwapFailed(f"{what} failed: {why}; {again}")

    def finish(self, plan: Plan, failure: SwapFailed | None, result: UpResult) -> None:
        """What stopped and what the drain did, in the result (its outcome a line)."""
        self.release()
        said = f"stopped {', '.join(plan.before)}" if plan.before else "nothing was running"
        cut = self.cut_line()
        result.outcome = f"{said}; {cut}" if cut else said
        result.stopped, result.drained = list(plan.before), self.drained
        result.warnings += self.warnings

    def cut_line(self) -> str:
        """What the drain did, in words: `2 in flight finished, 1 cut at the drain timeout (5s)`."""
        if self.drained is None:
            return ""
        finished, cut = self.drained["finished"], self.drained["cut"]
        if not finished and not cut:
            return "nothing was in flight"
        said = f"{finished} request(s) in flight finished"
        return said + (f", {cut} cut at the drain timeout ({self.drain_timeout:g}s)" if cut else ", none cut")


def project_volumes(stack: Stack, client: docker.DockerClient) -> list[Volume]:
    """The project's named volumes (compose labels them with the project), by name."""
    found = client.volumes.list(filters={"label": f"{label_names.COMPOSE_PROJECT}={stack.project}"})
    return sorted(found, key=lambda v: v.name)


def kept_volumes(stack: Stack, client: docker.DockerClient) -> str | None:
    """What a plain `down` says about the volumes it kept (None: the project has none)."""
    names = [v.name for v in project_volumes(stack, client)]
    if not names:
        return None
    several = len(names) > 1
    return (
        f"kept the project's volume{'s' if several else ''} {', '.join(names)} (the gateway's switch "
        f"history{', Prometheus data' if several else ''}): `compose-spec -p {stack.project} down "
        f"--volumes` removes {'them' if several else 'it'}"
    )


def down(
    stack: Stack,
    *,
    client: docker.DockerClient,
    progress: Say = quiet,
    waiting: Say | None = None,
    volumes: bool = False,
    takeover: bool = False,
    dry_run: bool = False,
) -> UpResult:
    """Plan and run `down` under the project's lock (a dry run reads only: no lock); the drain
    waits up to `stack.gateway.drain_timeout` (`down -t` sets it)."""
    timeout = stack.gateway.drain_timeout
    ctx = Context(stack, client, UpOptions(), progress, waiting or progress)

    def plan(snap: Snapshot) -> Plan:
        names = tuple(v.name for v in project_volumes(stack, client))
        return plan_down(snap, stack, timeout, names, volumes, takeover)

    if dry_run:
        planned = plan(take(stack, client))
        outcome = "refused" if planned.refused else "planned"
        return UpResult(stack.project, outcome, plan=planned.as_data(), plan_text=planned.describe())
    with change_lock(stack.project, True, progress):
        snap = take(stack, client)
        planned = plan(snap)
        if planned.refused:
            raise UsageError(planned.refused)
        takes_over = [n for n in planned.notes if n.startswith("takes over")]
        result = UpResult(stack.project, "stopped", notes=takes_over, plan=planned.as_data())
        change = replace(Change.of(ctx, "down", rollback=False), ran="stopped")
        runner.run(planned, Downer(ctx, snap, timeout), result, change)
    return result


def _leave_live_set(ctx: Context, variant: str, snap: Snapshot) -> str:
    """`down VARIANT` on a live set: the set less VARIANT, run as every live change is (a running
    record, a history line, the undo on a failure): the gateway routes to the others, then each
    of its members is drained and stopped. Refused when it is all that serves."""
    members = [r.member() for r in snap.live_running]
    mine = [m for m in members if m.variant == variant]
    if len(mine) == len(members):
        raise DownRefused(
            f"{variant} is all the live set serves: stopping it leaves nothing serving; "
            "`compose-spec down` stops everything"
        )
    left = tuple(m for m in members if m.variant != variant)
    routes = ops.Publish(tuple(m.upstream() for m in left), tuple(m.upstream() for m in members))
    todo: list[ops.Op] = [routes]
    todo += [op for m in mine for op in (ops.Drain(m.name), ops.Stop(m, live=True))]
    plan = Plan(tuple(m.name for m in members), tuple(m.name for m in left), tuple(todo))
    kept = Path(next(r.run_file for r in snap.live_running if r.variant != variant))
    result = run_live(ctx, plan, (), snap, lambda: kept, "stopped")
    cut = (result.drained or {}).get("cut")
    said = f"stopped {variant} ({', '.join(m.name for m in mine)}); the live set serves on"
    return said + (f" ({cut} request(s) cut at the drain timeout)" if cut else "")


def stop_variant(ctx: Context, variant: str, force: bool = False, takeover: bool = False) -> str:
    """Stop one variant's container, asleep, awake, failed or serving; say what was done. Only
    ever that variant: the live set, the gateway and its port holder stay. The serving one is
    drained first and, when nothing else would serve, refused unless `force`."""
    stack = ctx.stack
    snap = take(stack, ctx.client)
    foreign = foreign_running(snap, stack)
    if foreign and not takeover:
        raise UsageError(down_refusal(foreign, stack.project, f"down {variant}"))
    if any(r.variant == variant for r in snap.live_running):  # the others serve on
        return _leave_live_set(ctx, variant, snap)
    live = {r.container for r in snap.live_running}
    mine = [m for m in snap.members if m.variant == variant and m.info.name not in live]
    if not mine:
        return f"{variant} is not running; nothing stopped"
    others = {m.variant for m in snap.members if m.serving and m.info.name not in live} - {variant}
    serving_on = sorted({r.name for r in snap.live_running} | others)
    serves = any(m.serving for m in mine)
    asleep = all(m.asleep for m in mine)
    if serves and not serving_on and not force:
        sleepers = sorted({m.variant for m in snap.asleep} - {variant})
        if sleepers:
            raise DownRefused(
                f"{variant} serves: stopping it leaves nothing serving while {', '.join(sleepers)} sleep "
                f"(clients would be held, then answered 503); `compose-spec up {sleepers[0]}` switches, "
                f"`compose-spec down` stops everything, `compose-spec down {variant} --force` "
                f"stops only {variant}"
            )
        raise DownRefused(
            f"{variant} is all that serves: stopping it leaves nothing serving (clients would be held, "
            f"then answered 503); `compose-spec down` stops the project, `compose-spec down {variant} "
            f"--force` stops only {variant} and keeps the gateway"
        )
    todo: list[ops.Op] = [ops.Hold(variant)] if serves and snap.gateway_running else []
    label = f"{variant}{' (asleep)' if asleep else ''}"
    todo += [ops.Stop(ops.Member(label, variant, m.info.name, "", "")) for m in mine]
    engine = Downer(ctx, snap, stack.gateway.drain_timeout)
    change = replace(Change.of(ctx, "down", rollback=False), ran="stopped")
    runner.run(Plan((variant,), (), tuple(todo)), engine, UpResult(variant, "stopped"), change)
    names = ", ".join(m.info.name for m in mine)
    cut = engine.cut_line()
    cut = f" ({cut})" if cut else ""
    if asleep:
        return f"stopped {variant} (it was asleep: its GPU residue and host RAM are free; {names})"
    if serving_on:
        return f"stopped {variant} ({names}){cut}; {', '.join(serving_on)} serve(s) on"
    if serves:
        left = sorted({m.variant for m in snap.members} - {variant})
        also = f" ({', '.join(left)} left)" if left else ""
        return (
            f"stopped {variant} ({names}){cut}; nothing serves now{also}: `compose-spec up VARIANT` "
            "serves one, `compose-spec down` removes the gateway too"
        )
    return f"stopped {variant} ({names}; it did not serve)"


def down_variant(
    stack: Stack,
    variant: str,
    *,
    client: docker.DockerClient,
    force: bool = False,
    takeover: bool = False,
    progress: Say = quiet,
) -> str:
    """Stop one variant's container under the project's lock (see `stop_variant`); it runs as
    every change does (`composer.swap.runner`: a running record, a history line)."""
    with change_lock(stack.project, True, progress):
        return stop_variant(Context(stack, client, UpOptions(), progress, progress), variant, force, takeover)


def restart_target(stack: Stack, client: docker.DockerClient, variant: str | None = None) -> str:
    """The variant `restart` brings back through `up --force-recreate`: the one serving (VARIANT
    must be it). A live set, or nothing serving, is refused with the command that does it."""
    snap = take(stack, client, ask_sleeping=False)
    if snap.live_running:
        names = ", ".join(r.name for r in snap.live_running)
        raise UsageError(
            f"a live set runs ({names}): restart brings back the one serving variant; restart a member "
            "with `compose-spec down VARIANT` then `compose-spec up A B` (the others serve throughout)"
        )
    current = snap.current
    if current is None:
        raise DownRefused(f"nothing serves in project {stack.project}: `compose-spec up VARIANT` starts one")
    if variant is not None and variant != current.variant:
        raise UsageError(
            f"{variant} does not serve ({current.variant} does): restart brings back what serves; "
            f"`compose-spec up {variant}` switches to {variant}"
        )
    return current.variant
