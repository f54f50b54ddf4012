"""The single switch, health-gated with rollback: one snapshot, one plan (pure), then Docker.

`prepare` reads the project once, runs doctor's fast checks, writes the run file and decides
every typed operation before anything stops (`plan.decide`, with the standby fit from
`composer.capacity`; `--dry-run` stops here); `execute` runs them with `transaction.DockerSwap`,
recording the stage (`journal.SwapRecord`, what `status` shows) and the outcome (the history).
On any failure, Ctrl-C included, the inverses of what ran run, newest first; the error names
the cause first, then what the undo did.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from composer.capacity.model import release_budget
from composer.capacity.standby import decide_standby
from composer.doctor import preflight
from composer.doctor.report import fast_checks
from composer.engine import retry
from composer.engine.containers import RunningVariant
from composer.engine.gate import probe_once, running_target
from composer.errors import ComposerError, PreflightFailed, UsageError
from composer.gateway.control.switchlog import GATEWAY_UPDATED
from composer.render.files import run_file
from composer.render.spec import Owner
from composer.render.target import Target, resolve_target
from composer.stack.model import Stack
from composer.swap import gateway_change, probation, runner, snapshot, transaction
from composer.swap.gateway_replace import retire_extra_gateways
from composer.swap.gpu_release import NO_GPUS
from composer.swap.holding import EarlyHold, open_early
from composer.swap.journal import NOTE, WARNING
from composer.swap.ops import Member
from composer.swap.outcome import UpResult
from composer.swap.plan import (  # noqa: F401 - plan_swap is public here
    Bring,
    Plan,
    decide,
    plan_swap,
    rollback_source_problem,
    snapshot_foreign,
    stop_instead,
)
from composer.swap.profiles import start_profiles
from composer.swap.runner import Change
from composer.swap.transaction import Context


def preflight_warnings(ctx: Context, targets: Sequence[Target], snap: snapshot.Snapshot) -> list[str]:
    """The fast subset of doctor's checks for each target, on the snapshot's containers: their
    warnings (each once, also said now, before anything changes), or PreflightFailed."""
    known = [m.container.container for m in snap.members] + ([snap.gateway] if snap.gateway else [])
    warnings: dict[str, None] = {}
    for target in targets:
        findings = fast_checks(
            ctx.stack, target, ctx.client, allow_weak_key=ctx.options.allow_weak_key, known=known
        )
        raise_failed(findings)
        warnings.update(dict.fromkeys(f"{f.detail}: {f.fix}" for f in findings if f.status == "warn"))
    for text in warnings:
        ctx.say(WARNING + text)
    if ctx.stack.gpus is None:  # what the release wait will note after the stop, said before it
        ctx.say(NOTE + NO_GPUS)
    return list(warnings)


def raise_failed(findings: list[preflight.Finding]) -> None:
    first = next((f for f in findings if f.failed), None)
    if first is not None:
        raise PreflightFailed(f"preflight: {first.detail}" + (f"; fix: {first.fix}" if first.fix else ""))


def swap(ctx: Context, target: Target, snap: snapshot.Snapshot | None = None) -> UpResult:
    """Swap `target` in (one snapshot, or `snap`; one plan); raise SwapFailed after rolling back.
    A dry run returns the plan in `result.plan`; else it runs, then `options.profiles` start."""
    began = time.monotonic()
    result = UpResult(variant=target.name, outcome="started")
    early = None
    if not ctx.options.dry_run and target.gateway is not None:  # the session opens while we read and plan
        early = open_early(
            ctx.stack, ctx.client, target.gateway.container_name, ctx.say, target.name, ctx.waiting
        )
    try:
        snap, plan, compose_file = prepare(ctx, target, result, early, snap)
        if ctx.options.dry_run:
            result.outcome = "refused" if plan.refused else "unchanged" if plan.no_op else "planned"
            return result
        execute(ctx, plan, target, compose_file, snap, result, began, early)
    finally:
        if early is not None:
            early.drop()
    if not probation.is_watcher():  # they started when `up` returned
        result.notes += start_profiles(ctx, compose_file)
    return result


def prepare(
    ctx: Context,
    target: Target,
    result: UpResult,
    early: EarlyHold | None = None,
    snap: snapshot.Snapshot | None = None,
) -> tuple[snapshot.Snapshot, Plan, Path]:
    """Read the project once and decide the whole plan before anything stops (preflight, run file,
    gateway settings, standby fit); a killed gateway before a healthy target starts here (not dry)."""
    stack = ctx.stack
    dry_run = ctx.options.dry_run
    snap = snap or snapshot.take(stack, ctx.client)
    if snap.extra_gateways and not dry_run:
        retire_extra_gateways(ctx.client, snap.extra_gateways, ctx.say)
        snap = snapshot.take(stack, ctx.client)
    result.warnings += preflight_warnings(ctx, [target], snap)
    current = snap.current
    same = current is not None and current.variant == target.name and current.config_hash == target.hash
    # the run file; a real swap also prunes the target's older ones (never a container's own)
    compose_file = run_file(target, keep=None if dry_run else (current.config_file if current else None,))
    gateway = target.gateway
    foreign = not ctx.options.takeover and bool(snapshot_foreign(snap, Owner.of(stack)))  # refused below
    recovered = same and gateway is not None and not snap.gateway_running and not foreign
    if recovered and gateway is not None and not dry_run:
        # the gateway was killed or removed: start only it, never reload a healthy variant
        ctx.say("the gateway is not running: starting it")
        transaction.compose_up(ctx, compose_file, gateway.service)
        snap = snapshot.take(stack, ctx.client)
        current = snap.current
    if recovered and dry_run:  # the variant cannot be probed through a port nobody listens on
        result.notes.append("the gateway is not running: `up` starts it, then probes the variant through it")
        ready = current is not None and current.docker_health != "unhealthy"
    else:
        ready = same and current is not None and is_ready(stack, current, settle_s=10.0 if recovered else 0.0)
    plan = decide(
        snap,
        target.name,
        target.hash,
        target_sleeps=target.variant.standby == "sleep",
        sleeps_in_stack={name: v.standby == "sleep" for name, v in stack.variants.items()},
        current_ready=ready,
        gateway=None
        if ctx.options.keep_gateway or gateway is None
        else gateway_change.decide(stack, gateway, compose_file, snap, early.control() if early else None),
        owner=Owner.of(stack),
        takeover=ctx.options.takeover,
        force_recreate=ctx.options.force_recreate,
        bring=bring(ctx, target, compose_file, current),
    )
    if plan.refused and not dry_run:
        raise UsageError(plan.refused)
    result.previous = current.variant if current else None
    if plan.steps:
        asleep = [m.variant for m in snap.asleep if m.info.name not in plan.stop_first]
        plan = check_standby_fits(ctx, target, plan, result, asleep)
    result.plan = plan.as_data()
    result.plan_text = plan.describe()
    result.notes += list(plan.notes)
    return snap, plan, compose_file


def gpus_text(stack: Stack) -> str:
    return ",".join(stack.gpus) if stack.gpus else "all"


def bring(ctx: Context, target: Target, file: Path, current: RunningVariant | None) -> Bring:
    """What the plan's operations carry beyond the snapshot, resolved here once; the serving
    variant's run file is rendered again when its recorded one is gone (not in a dry run)."""
    stack, spec, source = ctx.stack, target.spec, None
    recorded = current is not None and current.config_file and Path(current.config_file).is_file()
    if current is not None and not ctx.options.dry_run and not recorded:
        try:
            previous = resolve_target(stack, current.variant)
            source = (str(run_file(previous)), previous.spec.compose_service)
        except ComposerError:  # the stack no longer has it: the rollback has nothing to start
            source = None
    service = spec.compose_service if target.variant.standby == "sleep" else stack.service
    speculative = target.variant.speculative is not None
    member = Member(
        target.name, target.name, spec.container_name, service, str(file), gpus_text(stack), speculative
    )
    settle, probation, warmup = ctx.options.settle, ctx.options.probation, stack.gateway.warmup_requests
    gateway = target.gateway is not None
    return Bring(member, gateway, gpus_text(stack), settle, warmup, probation, source, stack.service)


def execute(
    ctx: Context,
    plan: Plan,
    target: Target,
    compose_file: Path,
    snap: snapshot.Snapshot,
    result: UpResult,
    began: float,
    early: EarlyHold | None = None,
) -> None:
    """Run a prepared plan (`composer.swap.runner`: each outcome, a failure's too, goes to the
    history; `began`: when `up` began; `early`: the gateway's control session opened while planning)."""
    if plan.no_op:
        result.outcome = "unchanged"
        result.notes.append(f"{plan.target} already serves with the same configuration")
        result.timings["total"] = time.monotonic() - began
        return
    previous = snap.current
    if previous is not None and "stop" in plan.steps and ctx.options.rollback:
        raise_failed([preflight.check_rollback_image(ctx.client, previous.variant, previous.image)])
        problem = rollback_source_problem(plan.rollback)
        if problem:
            raise PreflightFailed(
                f"preflight: {problem}; fix: restore it, or remove it (the rollback then starts "
                f"{previous.variant} from this stack), or pass --no-rollback to swap without a way back"
            )
    # what the gateway's switch log is told when the held requests flow
    if not plan.steps:  # only the gateway's settings changed
        result.outcome = GATEWAY_UPDATED
    elif "wake" in plan.steps:
        result.outcome = "woke"
    elif plan.steps[0] == "route":
        result.outcome = "routed"
    else:
        result.outcome = "swapped" if previous else "started"
    budget = partial(release_budget, ctx.stack, target.variant)
    swap = transaction.DockerSwap(ctx, result, target.gateway, compose_file, budget, early)
    runner.run(plan, swap, result, Change.of(ctx), began)
    expected = target.variant.min_kv_cache_tokens
    tokens = result.kv_cache_tokens
    if plan.steps and expected and tokens is not None and tokens < expected:
        result.warnings.append(
            f"KV cache holds {tokens:,} tokens, below the expected {expected:,}: "
            "GPU memory may still be held by another process"
        )


def check_standby_fits(
    ctx: Context, target: Target, plan: Plan, result: UpResult, sleeping: list[str]
) -> Plan:
    """The memory planner, before anything stops (`sleeping`: the variants asleep meanwhile): refuse
    with the numbers, or (`standby_fallback = "stop"`) stop instead of a sleep that does not fit;
    notes to `result`, figures to the plan."""
    stack = ctx.stack
    sleeping_next = plan.serving if "sleep" in plan.steps else None
    decision = decide_standby(stack, target.name, sleeping, sleeping_next)
    result.notes += decision.plan.costs + decision.plan.notes
    plan = replace(plan, capacity=decision.plan.figures)
    if not decision.stop_instead:
        return plan
    ctx.say(decision.fallback)
    result.warnings.append(decision.fallback)
    return stop_instead(plan, gpus_text(stack))


def is_ready(stack: Stack, current: RunningVariant, settle_s: float = 0.0) -> bool:
    """One probe; with `settle_s`, probes until then (a gateway that just started)."""

    def attempt() -> bool:
        if probe_once(running_target(stack, current)):
            return True
        raise retry.Pending(f"{current.variant} not ready yet", result=False)

    return bool(retry.settle_ready(settle_s)(attempt))
