"""Live sets: several variants (or replicas) serving at once behind the one gateway.

`up A B` (or `up` with `[gateway] live`) makes the live set exactly {A, B}; `up C` on a
running live set makes C's one serving container replace it (`plan_alone`). `up_set` is
`up`'s one entry (one snapshot, `desired`, then the plan: `composer.swap.plan`). Each new
container is gated like a swap (on its own address, a settle watch, a speculative variant's
acceptance). `LiveSwapper` is the Docker dispatch table `composer.swap.execute` runs them with:
a failure or a stop signal undoes what ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.engine import bootlog, retry
from composer.engine.containers import gateway_container
from composer.engine.gate import GateTarget, wait_ready, watch_settled
from composer.engine.variant_container import VariantContainer
from composer.errors import ConfigError, GatewayControlError, SwapFailed, UsageError
from composer.render.files import prune_run_files, write_atomic
from composer.render.files import run_file as variant_run_file
from composer.render.gateway import SERVICE as GATEWAY_SERVICE
from composer.render.live import LiveTarget, render_live, resolve_live
from composer.render.runfiles import state_dir
from composer.render.spec import CONTAINER_PORT, Owner
from composer.render.target import Target
from composer.stack.model import Stack
from composer.stack.workload_classes import live_routing
from composer.swap import snapshot
from composer.swap.execute import Handlers, Say, execute, quiet
from composer.swap.gpu_release import ReleaseWait
from composer.swap.journal import append_history
from composer.swap.ops import (
    AdoptMember,
    AwaitRelease,
    DrainMember,
    DrainSingle,
    GateMember,
    Member,
    Op,
    Publish,
    StartGateway,
    StartMember,
    StopMember,
    UpdateGateway,
)
from composer.swap.plan import LivePlan, plan_alone, plan_live
from composer.swap.snapshot import Snapshot
from composer.swap.transaction import Context, by_name, compose_up

if TYPE_CHECKING:
    import docker

    from composer.gateway.client import GatewayControl
    from composer.probes.gpu import GpuProbe
    from composer.swap.swapper import UpOptions, UpResult


@dataclass
class LiveResult:
    """What a live-set change did (the shape `report_swap` prints)."""

    variant: str
    outcome: str
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plan: dict[str, object] | None = None
    plan_text: str | None = None
    drained: dict[str, int] | None = None


def set_upstreams(control: GatewayControl, upstreams: list[dict[str, str]]) -> None:
    """Tell the gateway the live set it routes among; SwapFailed when it does not take it."""
    try:
        control.set_upstreams(upstreams)
    except GatewayControlError as err:
        raise SwapFailed(
            f"the gateway did not take the live set ({', '.join(u['name'] for u in upstreams)}): {err}; "
            "a gateway image without live sets needs a rebuild (bash images/gateway/build.sh)"
        ) from err


def single_inflight(raw: Mapping[str, Any] | None) -> int:
    """The gateway's requests in flight on its single upstream (`single_outstanding`; from an
    older gateway image: every forwarded request less those on live upstreams)."""
    if raw is not None and "single_outstanding" in raw:
        return max(0, int(raw["single_outstanding"] or 0))
    live = sum(int(u.get("outstanding") or 0) for u in upstream_states(raw).values())
    return max(0, int((raw or {}).get("inflight") or 0) - live)


@dataclass
class DrainTally:
    """What a live change's drains counted (both engines): requests cut at the drain timeout,
    streams continued on the other members, and streams refused (they drained)."""

    cut: int = 0
    continued: int = 0
    refused: int = 0

    def member(self, control: GatewayControl, stack: Stack, op: DrainMember) -> None:
        """Wait for the requests in flight on `op.name` (an upstream the gateway does not know has none)."""
        try:
            drained = control.drain_upstream(
                op.name, stack.gateway.drain_timeout, op.continue_streams, stack.max_model_len
            )
        except GatewayControlError:
            return
        self.cut += 0 if drained.done else drained.outstanding
        self.continued += drained.continued
        self.refused += drained.refused

    def single(self, control: GatewayControl, stack: Stack, waiting: Say, container: str) -> None:
        """Wait until nothing is in flight on the gateway's single upstream, or the drain
        timeout; what still runs then is counted cut (nothing when the gateway cannot say)."""

        def left() -> int:
            try:
                running = single_inflight(control.state().raw)
            except GatewayControlError:
                return 0
            if running:
                waiting(f"draining {container} ({running} in flight)")
                raise retry.Pending(f"{running} in flight on {container}", running)
            return 0

        self.cut += int(retry.single_drain(stack.gateway.drain_timeout)(left) or 0)

    def report(self, result: LiveResult) -> None:
        """The counts in `result.drained`, and a warning when something was cut."""
        result.drained = {"cut": self.cut, "continued": self.continued, "refused": self.refused}
        if self.cut:
            result.warnings.append(f"{self.cut} request(s) still running after the drain timeout were cut")


def upstream_states(raw: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per-upstream fields of the gateway's state (`upstreams`: a list or a mapping by name);
    empty when the gateway does not report them."""
    found = (raw or {}).get("upstreams")
    if isinstance(found, Mapping):
        return {str(k): dict(v) for k, v in found.items() if isinstance(v, Mapping)}
    if isinstance(found, list):
        return {str(u.get("name")): dict(u) for u in found if isinstance(u, Mapping) and u.get("name")}
    return {}


def live_acceptance(target: GateTarget, floor: float) -> float:
    """A speculative variant's acceptance over a short warm-up, from its own /metrics at
    `target` (its own address): above `floor`, or HealthCheckFailed (Docker and Kubernetes)."""
    import httpx

    from composer.errors import HealthCheckFailed
    from composer.swap.standby import check_acceptance, spec_counters

    def counters() -> tuple[float, float]:
        try:
            reply = httpx.get(f"{target.url}/metrics", timeout=30.0, trust_env=False)
            return spec_counters(reply.text)
        except (httpx.HTTPError, ValueError) as err:
            raise HealthCheckFailed(f"{target.variant}: /metrics could not be read: {err}") from err

    return check_acceptance(counters, target, floor)


class LiveSwapper:
    """Live-set changes on one Docker engine: its methods are the executor's dispatch table."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.stack, self.client, self.options = ctx, ctx.stack, ctx.client, ctx.options
        self.say, self.waiting = ctx.say, ctx.waiting
        self.kept = False  # a failed member's evidence was kept (and its log tail shown)
        self.timings: dict[str, float] = {}
        self.drained = DrainTally()
        self._releases: list[ReleaseWait] = []
        self.probe: GpuProbe | None = None  # None: the host's (NVML or nvidia-smi)

    # -- reading --------------------------------------------------------------------------
    def decide(self, target: LiveTarget, snap: Snapshot) -> LivePlan:
        """The live set's change, from the one snapshot."""
        single = snap.current
        shared = False
        if single is not None and self.stack.gpus is not None:
            used = set(self.stack.gpus)
            shared = "all" in used or any(used & set(s.member.gpus or used) for s in target.services)
        run_file = str(live_run_file(target, write=False)) if target.services else ""
        return plan_live(
            target,
            snap.live,
            single,
            snap.gateway_running,
            shared,
            Owner.of(self.stack),
            self.options.takeover,
            speculative={v for v in self.stack.variants if self.stack.variant(v).speculative is not None},
            run_file=run_file,
            continue_streams=self.stack.gateway.continues(self.options.drain),
        )

    def decide_alone(self, target: Target, run_file: Path, snap: Snapshot) -> LivePlan:
        """`up X` on a running live set: X's one serving container replaces it (`plan_alone`)."""
        spec, gpus = target.spec, "-" if self.stack.gpus is None else "all"  # it takes every GPU
        where = (spec.container_name, spec.compose_service, str(run_file), gpus)
        alone = Member(target.name, target.name, *where, target.variant.speculative is not None)
        return plan_alone(
            alone,
            target.hash,
            snap.live,
            self.stack.project,
            gateway_running=snap.gateway_running,
            owner=Owner.of(self.stack),
            takeover=self.options.takeover,
            continue_streams=self.stack.gateway.continues(self.options.drain),
        )

    def handlers(self) -> Handlers:
        return {
            StartGateway: self.start_gateway,
            StartMember: self.start_member,
            AdoptMember: self.adopt,
            GateMember: self.gate,
            Publish: self.publish,
            DrainMember: self.drain,
            DrainSingle: self.drain_single,
            StopMember: self.stop_member,
            AwaitRelease: self.await_release,
            UpdateGateway: self.update_gateway,
        }

    def preflight(self, checked: Sequence[Target], snap: Snapshot) -> list[str]:
        """The single swap's preflight for each variant the plan starts: its warnings, or PreflightFailed."""
        from composer.swap.swapper import preflight_warnings

        return list(dict.fromkeys(w for t in checked for w in preflight_warnings(self.ctx, t, snap)))

    def keep_evidence(self, op: Op, err: BaseException) -> None:
        """Before the undo removes a member that failed to start or pass its gate: keep its log."""
        from composer.errors import DiagnosedError
        from composer.swap import evidence

        if not isinstance(op, StartMember | GateMember):
            return
        cause = "interrupted" if isinstance(err, KeyboardInterrupt) else str(err).splitlines()[0]
        tail = bootlog.redact(err.log_tail if isinstance(err, DiagnosedError) else "", self.stack.api_key)
        evidence.keep(self.stack, self.client, op.member.variant, cause, tail, self.say, op.member.container)
        self.kept = bool(tail)

    # -- the operations -------------------------------------------------------------------
    def start_gateway(self, op: StartGateway) -> None:
        self.say("starting the gateway")
        compose_up(self.ctx, Path(op.run_file), GATEWAY_SERVICE)

    def start_member(self, op: StartMember) -> None:
        self.say(f"starting {op.member.name} on GPUs {op.member.gpus}")
        compose_up(self.ctx, Path(op.member.run_file), op.member.service)

    def adopt(self, op: AdoptMember) -> None:
        """The container joins as it runs: it must still be the running one the plan read."""
        if self._container(op.member.container).container.status != "running":
            raise SwapFailed(f"{op.member.container} stopped before it could join as {op.member.name}")

    def _control(self) -> GatewayControl | None:
        from composer.gateway.client import GatewayControl

        gateway = gateway_container(self.stack, self.client)
        return GatewayControl(gateway) if gateway is not None else None

    def _container(self, name: str) -> VariantContainer:
        found = by_name(self.ctx, name)
        if found is None:
            raise SwapFailed(f"{name} was not created")
        return found

    def _address(self, container: VariantContainer) -> str:
        """The container's address on the project's network (the gate reaches it directly)."""
        container.container.reload()
        networks = container.container.attrs.get("NetworkSettings", {}).get("Networks") or {}
        for network in networks.values():
            if network.get("IPAddress"):
                return str(network["IPAddress"])
        raise SwapFailed(f"{container.name} has no address on the project's network")

    def gate(self, op: GateMember) -> None:
        """The swap's gate on the member's own address, a settle watch, and for a speculative
        variant its acceptance over a short warm-up (`live_acceptance`)."""
        began = time.monotonic()
        container = self._container(op.member.container)
        target = GateTarget(
            op.member.name,
            CONTAINER_PORT,
            self._address(container),
            self.stack.served_model_name,
            self.stack.api_key,
        )
        wait_ready(container, target, began + self.options.timeout, self.options.poll_interval, self.waiting)
        ready = time.monotonic() - began
        self.timings[f"{op.member.name} start_to_ready"] = ready
        self.say(f"{op.member.name} is ready ({ready:.1f}s); watching it settle")
        watch_settled(container, target, self.options.settle, self.options.poll_interval)
        if op.member.speculative:
            rate = live_acceptance(target, self.stack.acceptance_floor)
            self.say(f"{op.member.name} accepts {rate:.2f} of its draft tokens")

    def publish(self, op: Publish) -> None:
        if control := self._control():
            set_upstreams(control, [dict(u) for u in op.upstreams])

    def drain(self, op: DrainMember) -> None:
        if control := self._control():
            self.drained.member(control, self.stack, op)

    def drain_single(self, op: DrainSingle) -> None:
        if control := self._control():
            self.drained.single(control, self.stack, self.waiting, op.container)

    def stop_member(self, op: StopMember) -> None:
        """Stop and remove the container (its GPUs read first, for `await_release`; gone is fine)."""
        from composer.probes.cgroups import container_pids
        from composer.probes.gpu import detect_probe

        found = by_name(self.ctx, op.member.container)
        if found is None:
            return
        if self.stack.gpus is not None and op.member.gpus != "-":
            devices = self.stack.gpus if op.member.gpus == "all" else tuple(op.member.gpus.split(","))
            pids = container_pids([found.container.id])
            self._releases.append(ReleaseWait.snapshot(self.probe or detect_probe(), devices, pids))
        self.say(f"stopping {op.member.name} ({op.member.container})")
        found.stop_and_remove(self.stack.stop_grace_period)

    def await_release(self, op: AwaitRelease) -> None:
        while self._releases:
            out = self._releases.pop(0).wait(self.options.release_timeout, self.waiting)
            if out.how == "timeout":
                self.say(out.detail)

    def update_gateway(self, op: UpdateGateway) -> None:
        """A new gateway container from `op.run_file` (the port stays open: `replace_gateway`)."""
        from composer.swap.gateway_replace import replace_gateway

        self.say(f"replacing the gateway: {op.why}")
        done = replace_gateway(self.stack, self.client, Path(op.run_file), None, self.say)
        self.say(f"the gateway was replaced ({done.finished} request(s) finished on the old one)")
        self.say(done.port_gap.line())

    # -- the change -----------------------------------------------------------------------
    def up(
        self,
        plan: LivePlan,
        checked: Sequence[Target],
        snap: Snapshot,
        run_file: Callable[[], Path] | None = None,
        outcome: str = "",
    ) -> LiveResult:
        """Run `plan` (`options.dry_run`: the plan only); `checked`: the targets it starts,
        `run_file`: writes their run file, `outcome`: what the result says once it ran."""
        began = time.monotonic()
        label = "+".join(plan.variants)
        result = LiveResult(variant=label, outcome="planned", plan=plan.as_data(), plan_text=plan.describe())
        if not plan.no_op:
            result.warnings += self.preflight(checked, snap)
        if self.options.dry_run:
            result.outcome = "refused" if plan.refused else "unchanged" if plan.no_op else "planned"
            return result
        if plan.refused:
            raise UsageError(plan.refused)
        if plan.no_op:
            # The gateway may have restarted with an older set in its environment: tell it again.
            self.publish(Publish(plan.upstreams, ()))
            result.outcome = "unchanged"
            result.notes.append(f"the live set {{{', '.join(plan.variants)}}} already runs")
            result.timings["total"] = time.monotonic() - began
            return result
        compose_file = run_file() if run_file is not None else None
        record = plan.recording(self.stack.project, self.options.timeout)
        try:
            ran = execute(
                plan.ops,
                self.handlers(),
                rollback=self.options.rollback,
                say=self.say,
                failed=self.keep_evidence,
                stage=record.stage,
            )
        except BaseException as err:
            if isinstance(err, SwapFailed):  # the key never reaches the output, as in a swap
                err.log_tail = bootlog.redact(err.log_tail, self.stack.api_key)
                err.tail_shown = self.kept
            result.timings.update(self.timings)
            live_history(self.stack, plan, "failed", result, err)
            raise
        finally:
            record.close()
        kept = [r.run_file for r in snapshot.take(self.stack, self.client, ask_sleeping=False).live]
        prune_run_files(self.stack.project, "live", keep=(*([compose_file] if compose_file else []), *kept))
        if plan.start_gateway:
            self._answers(label)
        result.timings.update(self.timings)
        self.drained.report(result)
        result.outcome = outcome
        result.timings["total"] = time.monotonic() - began
        live_history(self.stack, plan, result.outcome, result, ran=ran)
        return result

    def _answers(self, names: str) -> None:
        """A gateway this change started answers through the published port and reaches the
        set before `up` returns: the first request after it is neither refused nor reset."""
        from composer.engine.published_port import ANSWER_TIMEOUT, wait_published

        gateway = gateway_container(self.stack, self.client)
        published = wait_published(gateway, self.stack) if gateway is not None else None
        if published is None or not published.answers:
            detail = published.detail if published is not None else "its container is gone"
            raise SwapFailed(f"the started gateway does not answer through the published port: {detail}")
        control = self._control()
        if control is not None and not control.wait_ready(ANSWER_TIMEOUT):
            self.say(f"the gateway answers but does not reach {names} after {ANSWER_TIMEOUT:.0f}s")

    def remove(self, variant: str, snap: Snapshot) -> str:
        """`down VARIANT` on a live set: drain and stop its containers; refused when it is all that serves."""
        running = snap.live_running
        mine = [Member(r.name, r.variant, r.container, r.service, r.run_file, r.gpus) for r in running]
        mine = [m for m in mine if m.variant == variant]
        if not mine:
            return f"{variant} is not live; nothing stopped"
        if len(mine) == len(running):
            from composer.errors import DownRefused

            raise DownRefused(
                f"{variant} is all the live set serves: stopping it leaves nothing serving; "
                "`compose-spec down` stops everything"
            )
        before = tuple(Member(r.name, r.variant, r.container, r.service, "").upstream() for r in running)
        ops: list[Op] = [Publish(tuple(u for u in before if u not in [m.upstream() for m in mine]), before)]
        ops += [op for m in mine for op in (DrainMember(m.name), StopMember(m))]
        execute(ops, self.handlers(), say=self.say)
        said = f"stopped {variant} ({', '.join(m.name for m in mine)}); the live set serves on"
        cut = self.drained.cut
        return said + (f" ({cut} request(s) cut at the drain timeout)" if cut else "")


def started_targets(stack: Stack, target: LiveTarget, plan: LivePlan) -> list[Target]:
    """The variants `plan` starts, one Target each (what the preflight checks)."""
    started = {op.member.name for op in plan.ops if isinstance(op, StartMember)}
    services = {s.member.variant: s for s in target.services if s.name in started}.values()
    return [Target(stack.variant(s.member.variant), s.spec, target.gateway) for s in services]


def live_history(
    stack: Stack,
    plan: LivePlan,
    outcome: str,
    result: LiveResult,
    err: BaseException | None = None,
    ran: Sequence[Op] = (),
) -> None:
    """A live change's history line (Docker and Kubernetes): its target, outcome, the
    operations that ran (all planned ones when none did) and the cause of a failure."""
    append_history(
        stack.project,
        {
            "kind": "live",
            "source": None,
            "target": "+".join(plan.variants),
            "outcome": outcome,
            "steps": [op.describe() for op in (ran or plan.ops)],
            "timings": {k: round(v, 3) for k, v in result.timings.items()},
            "cause": str(err).splitlines()[0][:500] if err else None,
        },
    )


def live_run_file(target: LiveTarget, directory: Path | None = None, write: bool = True) -> Path:
    """The live set's run file, `live-<hash>.yml` in the state folder (written if needed)."""
    out = (directory or state_dir()) / target.services[0].spec.project
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
) -> UpResult | LiveResult:
    """`up` on Docker, its one entry: under the lock (none for a dry run) ONE snapshot, the desired
    set (`desired`), and the single swap, a live change or `plan_alone`; `options.profiles` too."""
    from composer.swap.gateway_replace import retire_extra_gateways
    from composer.swap.lock import swap_lock

    ctx = Context(stack, client, options, progress, waiting or progress)
    if options.dry_run:  # reads only: no lock, nothing started, stopped or routed
        return _up_desired(ctx, requested, snapshot.take(stack, client))
    with swap_lock(stack.project, options.wait_for_lock, progress):
        snap = snapshot.take(stack, client)
        if snap.extra_gateways:
            retire_extra_gateways(client, snap.extra_gateways, progress)
            snap = snapshot.take(stack, client)
        return _up_desired(ctx, requested, snap)


def _up_desired(ctx: Context, requested: Sequence[str], snap: Snapshot) -> UpResult | LiveResult:
    from composer.render.target import resolve_target
    from composer.swap.desired import EXCLUSIVE, desired
    from composer.swap.profiles import check_profiles, start_profiles
    from composer.swap.swapper import swap

    stack, options = ctx.stack, ctx.options
    want = desired(requested, stack, [r.name for r in snap.live_running])
    if not want.replaces and want.mode == EXCLUSIVE:  # a plain switch: the single swap
        single = resolve_target(stack, want.variants[0])
        if not options.dry_run:
            check_profiles(ctx, single.prometheus)
        return swap(ctx, single, dry_run=options.dry_run, snap=snap)
    if options.force_recreate:
        raise ConfigError("--force-recreate restarts the one serving variant; this up changes a live set")
    swapper = LiveSwapper(ctx)
    if want.replaces:  # {X} alone where a live set runs: X's one serving container replaces it
        single = resolve_target(stack, want.variants[0])
        if single.variant.standby == "sleep":  # it would serve from its own service
            raise ConfigError(
                f"{single.name} sleeps on standby: `down` the live set, then `up {single.name}`"
            )
        files: Callable[[], Path] = partial(variant_run_file, single)
        plan = swapper.decide_alone(single, files(), snap)
        checked: list[Target] = [single] if plan.start else []
        prometheus, outcome = single.prometheus, f"{single.name} serves alone (the live set left)"
    else:
        target = resolve_live(stack, want.variants)  # unknown names, overlapping GPU sets: exit 2 first
        plan = swapper.decide(target, snap)
        checked = started_targets(stack, target, plan)
        members = ", ".join(f"{s.name} (GPUs {s.member.gpus_text})" for s in target.services)
        prometheus, outcome = target.prometheus, f"live set {members}"
        files = partial(live_run_file, target)
    if not options.dry_run:
        check_profiles(ctx, prometheus)
    result = swapper.up(plan, checked, snap, files, outcome)
    by_class, routing = live_routing(stack.workloads, plan.variants)
    result.notes += [] if by_class or want.replaces else [f"the live set routes {routing}"]
    if options.profiles and not options.dry_run:
        result.notes += start_profiles(ctx, files())
    return result
