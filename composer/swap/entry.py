"""`up`'s one entry on Docker (`up_set`): one snapshot, the desired set (`desired`), then the
single switch (`swapper`), a live set's change (`plan_live`: the set becomes exactly {A, B}),
or X's one container replacing a running live set (`plan_alone`). `run_live` runs a live plan
with Docker's engine (`transaction.DockerSwap`) through the one runner (`composer.swap.runner`):
a failure or a stop signal undoes what ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from composer.errors import ConfigError, UsageError
from composer.render.files import prune_run_files, write_atomic
from composer.render.files import run_file as variant_run_file
from composer.render.gateway import GatewaySpec, build_gateway_spec
from composer.render.live import LiveTarget, render_live, resolve_live
from composer.render.runfiles import state_dir
from composer.render.spec import Owner
from composer.render.target import Target, resolve_target
from composer.stack.model import Stack
from composer.stack.workload_classes import live_routing
from composer.swap import gateway_change, probation, runner, snapshot
from composer.swap.desired import EXCLUSIVE, desired
from composer.swap.execute import Say, quiet
from composer.swap.gateway_replace import repair_port, retire_extra_gateways
from composer.swap.ops import Member, Publish, Start
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.plan import Plan, plan_alone, plan_live, snapshot_foreign
from composer.swap.profiles import check_profiles, start_profiles
from composer.swap.runner import Change
from composer.swap.swapper import preflight_warnings, swap
from composer.swap.transaction import Context, DockerSwap

if TYPE_CHECKING:
    import docker


def decide(ctx: Context, target: LiveTarget, snap: snapshot.Snapshot) -> Plan:
    """The live set's change, from the one snapshot."""
    stack, options = ctx.stack, ctx.options
    single = snap.current
    shared = False
    if single is not None and stack.gpus is not None:
        used = set(stack.gpus)
        shared = "all" in used or any(used & set(s.member.gpus or used) for s in target.services)
    run_file = str(live_run_file(target, write=False)) if target.services else ""
    return plan_live(
        target,
        snap.live,
        single,
        snap.gateway_running,
        shared,
        Owner.of(stack),
        options.takeover,
        speculative={v for v in stack.variants if stack.variant(v).speculative is not None},
        run_file=run_file,
        continue_streams=stack.gateway.continues(options.drain),
        idle=idle_containers(snap),
        gateway=gateway_change.in_place(stack, target.gateway, snap) if target.gateway else None,
    )


def idle_containers(snap: snapshot.Snapshot) -> list[Member]:
    """The project's containers that neither serve, sleep nor belong to the live set: a failed
    change's, left with --no-rollback (a live change removes them)."""
    members = {r.container for r in snap.live}
    return [
        Member(m.variant, m.variant, m.info.name, m.info.service or "", "")
        for m in snap.members
        if not m.serving and not m.asleep and m.info.name not in members
    ]


def decide_alone(ctx: Context, target: Target, run_file: Path, snap: snapshot.Snapshot) -> Plan:
    """`up X` on a running live set: X's one serving container replaces it (`plan_alone`)."""
    stack, options = ctx.stack, ctx.options
    spec, gpus = target.spec, "-" if stack.gpus is None else "all"  # it takes every GPU
    where = (spec.container_name, spec.compose_service, str(run_file), gpus)
    alone = Member(target.name, target.name, *where, target.variant.speculative is not None)
    return plan_alone(
        alone,
        target.hash,
        snap.live,
        stack.project,
        gateway_running=snap.gateway_running,
        owner=Owner.of(stack),
        takeover=options.takeover,
        continue_streams=stack.gateway.continues(options.drain),
    )


def run_live(
    ctx: Context,
    plan: Plan,
    checked: Sequence[Target],
    snap: snapshot.Snapshot,
    run_file: Callable[[], Path],
    outcome: str,
    gateway: GatewaySpec | None = None,
) -> UpResult:
    """Run `plan` with Docker's engine (`options.dry_run`: the plan only); `checked`: the targets
    it starts, `run_file`: writes their run file, `outcome`: what the result says once it ran."""
    began = time.monotonic()
    label = "+".join(plan.variants)
    planned = "refused" if plan.refused else "unchanged" if plan.no_op else "planned"
    result = UpResult(variant=label, outcome=planned, plan=plan.as_data(), plan_text=plan.describe())
    swapper = DockerSwap(ctx, result, gateway)
    if not plan.no_op:
        result.warnings += preflight_warnings(ctx, checked, snap)
    if ctx.options.dry_run:
        return result
    if plan.refused:
        raise UsageError(plan.refused)
    if plan.no_op:
        # The gateway may have restarted with an older set in its environment: tell it again.
        live = {r.name: r.member().upstream() for r in snap.live}
        swapper.publish(Publish(tuple(live[name] for name in plan.after if name in live), ()))
        result.notes.append(f"the live set {{{', '.join(plan.variants)}}} already runs")
        result.timings["total"] = time.monotonic() - began
        return result
    compose_file = run_file()
    result.outcome = outcome
    runner.run(plan, swapper, result, Change.of(ctx, "live"), began)
    kept = [r.run_file for r in snapshot.take(ctx.stack, ctx.client, ask_sleeping=False).live]
    prune_run_files(ctx.stack.project, "live", keep=(compose_file, *kept))
    if plan.start_gateway:
        swapper.answers(label)
    return result


def started_targets(stack: Stack, target: LiveTarget, plan: Plan) -> list[Target]:
    """The variants `plan` starts, one Target each (what the preflight checks)."""
    started = {op.member.name for op in plan.ops if isinstance(op, Start) and op.live and op.how == "start"}
    services = {s.member.variant: s for s in target.services if s.name in started}.values()
    return [Target(stack.variant(s.member.variant), s.spec, target.gateway) for s in services]


def live_run_file(target: LiveTarget, write: bool = True) -> Path:
    """The live set's run file, `live-<hash>.yml` in the state folder (written if needed)."""
    out = state_dir() / target.services[0].spec.project
    if not write:
        return out / f"live-{target.hash}.yml"
    (file,) = render_live(target, out, f"live-{target.hash}.yml")
    write_atomic(file)
    return file.path


def up_set(
    stack: Stack,
    requested: Sequence[str],
    *,
    client: docker.DockerClient,
    options: UpOptions,
    progress: Say = quiet,
    waiting: Say | None = None,
) -> UpResult:
    """`up` on Docker, its one entry: under the lock (none for a dry run) ONE snapshot, the desired
    set (`desired`), and the single swap, a live change or `plan_alone`; `options.profiles` too."""
    ctx = Context(stack, client, options, progress, waiting or progress)
    if options.dry_run:  # reads only: no lock, nothing started, stopped or routed
        return _up_desired(ctx, requested, snapshot.take(stack, client))
    with probation.watcher_exits(), probation.change_lock(stack.project, options.wait_for_lock, progress):
        snap = snapshot.take(stack, client)
        if snap.extra_gateways:
            retire_extra_gateways(client, snap.extra_gateways, progress)
            snap = snapshot.take(stack, client)
        ours = options.takeover or not snapshot_foreign(snap, Owner.of(stack))  # else refused, untouched
        if ours and (repaired := repair_port(stack, client, progress, snap.gateway)):  # its holder stopped
            progress(repaired)
            snap = snapshot.take(stack, client)
        result = _up_desired(ctx, requested, snap)
        if probation.is_watcher():
            return result
        if repaired := repair_port(stack, client, progress):  # it stopped while nothing looked
            result.warnings.append(repaired)
        return result


def _up_desired(ctx: Context, requested: Sequence[str], snap: snapshot.Snapshot) -> UpResult:
    stack, options = ctx.stack, ctx.options
    want = desired(requested, stack, [r.name for r in snap.live_running])
    if not want.replaces and want.mode == EXCLUSIVE:  # a plain switch: the single swap
        single = resolve_target(stack, want.variants[0])
        if not options.dry_run:
            check_profiles(ctx, single.prometheus)
        return swap(ctx, single, snap)
    if options.force_recreate:
        raise ConfigError("--force-recreate restarts the one serving variant; this up changes a live set")
    if want.replaces:  # {X} alone where a live set runs: X's one serving container replaces it
        single = resolve_target(stack, want.variants[0])
        if single.variant.standby == "sleep":  # it would serve from its own service
            raise ConfigError(
                f"{single.name} sleeps on standby: `down` the live set, then `up {single.name}`"
            )
        files: Callable[[], Path] = partial(variant_run_file, single)
        plan = decide_alone(ctx, single, files(), snap)
        checked: list[Target] = [single] if plan.start else []
        prometheus, outcome = single.prometheus, f"{single.name} serves alone (the live set left)"
    else:
        target = resolve_live(stack, want.variants)  # unknown names, overlapping GPU sets: exit 2 first
        plan = decide(ctx, target, snap)
        checked = started_targets(stack, target, plan)
        members = ", ".join(f"{s.name} (GPUs {s.member.gpus_text})" for s in target.services)
        prometheus, outcome = target.prometheus, f"live set {members}"
        files = partial(live_run_file, target)
    if not options.dry_run:
        check_profiles(ctx, prometheus)
    result = run_live(ctx, plan, checked, snap, files, outcome, build_gateway_spec(stack))
    by_class, routing = live_routing(stack.workloads, plan.variants)
    result.notes += [] if by_class or want.replaces else [f"the live set routes {routing}"]
    if options.profiles and not options.dry_run:
        result.notes += start_profiles(ctx, files())
    return result
