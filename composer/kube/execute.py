"""The one Kubernetes executor: the typed operations of both plans (`composer.kube.plan`) run by
`composer.swap.execute` with one kubectl dispatch table (`KubeRollout.handlers`).

    take the project's swap lock -> read what the cluster runs -> write the manifests ->
    server-side apply the API key Secret -> plan -> execute -> result (and, for a live
    set, its history line and the gateway Deployment's upstream list).

The operations on the cluster: Roll (the one-variant Deployment), StartMember and Reapply
are kubectl apply -k and rollout status, RollBack `kubectl rollout undo` and rollout status;
GateMember the readiness gate and warm-up through the Service (the shared one for the
one-variant Deployment, past the gateway's hold; a live member's own, with a speculative
variant's draft acceptance, `composer.swap.live.live_acceptance`); HoldGateway and
ReleaseGateway the gateway's hold and drain through `kubectl exec`, UpdateGateway the gateway
rolled first when it changes itself; Publish, DrainMember and DrainSingle the gateway's
upstreams and drains; StopMember kubectl delete. A failure or the first Ctrl-C, SIGTERM or
SIGHUP runs the inverses of what ran, newest first (a switched Deployment rolled back and
the variant before gated again under the hold, then the hold released; a new live variant
deleted again, a leaving one applied again); `--no-rollback` leaves what ran as it is. The
failed operation's pod log is read before the undo.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from composer.engine.diagnose import hints
from composer.engine.gate import GateTarget
from composer.errors import ComposerError, KubectlFailed, PreflightFailed, SwapFailed
from composer.gateway.client import GatewayControl
from composer.kube.control import config_hash, gateway_deployment, kube_control, kube_hold, read_manifest
from composer.kube.kubectl import Kubectl
from composer.kube.plan import (
    SHARED,
    SINGLE,
    ClusterLive,
    _gateway_env,
    identity,
    live_set_names,
    plan_kube_live,
    plan_kube_single,
    read_cluster,
    write_live,
)
from composer.kube.rollout import (
    NO_KEY,
    KubeUpOptions,
    KubeUpResult,
    Say,
    Serving,
    _log_tail,
    _quiet,
    apply_secret,
    gate,
    rollout_status,
    serving,
    write_overlay,
)
from composer.render.kube_live import live_member_docs, live_shared_docs
from composer.render.kubernetes import Manifest, gateway_name
from composer.render.spec import CONTAINER_PORT
from composer.render.target import Target, resolve_target
from composer.signals import interrupts_ignored
from composer.stack.model import Stack
from composer.stack.placement import live_members
from composer.swap import ops
from composer.swap.execute import Handlers, execute
from composer.swap.holding import SwapHold
from composer.swap.live import DrainTally, LiveResult, live_acceptance, live_history, set_upstreams
from composer.swap.lock import swap_lock
from composer.swap.standby import ACCEPTANCE_WARMUP_REQUESTS


@dataclass(frozen=True)
class ForwardedTarget(GateTarget):
    """A variant reached through `kubectl port-forward`: `url` is the forward's own address
    (never a remote Docker engine's host, as a loopback GateTarget would become)."""

    forwarded: str = ""

    @property
    def url(self) -> str:
        return self.forwarded


class KubeRollout:
    """One change of what serves on the cluster (the one-variant switch or a live set's change):
    the stack, kubectl, the options, where progress goes, and the dispatch table of both plans."""

    control: GatewayControl | None = None
    hold: SwapHold | None = None
    variants: tuple[str, ...] = ()

    def __init__(self, stack: Stack, kubectl: Kubectl, options: KubeUpOptions, progress: Say, waiting: Say):
        self.stack = stack
        self.kubectl = kubectl
        self.options = options
        self.say = progress
        self.waiting = waiting
        self.timings: dict[str, float] = {}
        self.began: dict[str, float] = {}  # when each member's apply began (its gate's deadline)
        self.log = ""  # the pod log of the member that failed, read before the undo
        self.drained = DrainTally()
        self.held: dict[str, int] | None = None  # what the one-variant switch's drain counted
        self.notes: list[str] = []
        self.before: Serving | None = None  # what the one-variant Deployment ran before
        self.applied = False  # the last apply -k finished
        self.unchanged = False  # a Roll that failed left the Deployment as it was
        self.failed_at: ops.Op | None = None

    def handlers(self) -> Handlers:
        return {
            ops.UpdateGateway: self.update_gateway,
            ops.HoldGateway: self.hold_gateway,
            ops.ReleaseGateway: self.release_gateway,
            ops.Roll: self.start_member,
            ops.StartMember: self.start_member,
            ops.Reapply: self.start_member,
            ops.RollBack: self.roll_back,
            ops.GateMember: self.gate_member,
            ops.Publish: self.publish,
            ops.DrainMember: self.drain,
            ops.DrainSingle: self.drain_single,
            ops.StopMember: self.stop_member,
            ops.AwaitRelease: _placed_by_the_scheduler,
        }

    # -- the gateway ----------------------------------------------------------------------
    def _roll_gateway(self, run_file: str) -> None:
        """Apply the gateway's Deployment and wait for its rollout (its new pod is ready before
        the old one stops)."""
        self.kubectl.run(["apply", "--filename", run_file], timeout=120)
        rollout_status(self.kubectl, self.stack, self.options.timeout, gateway_name(self.stack))

    def update_gateway(self, op: ops.UpdateGateway) -> None:
        self.say(
            "the gateway itself changes: rolling it first (its new pod is ready before the old one stops)"
        )
        self._roll_gateway(op.run_file)

    def hold_gateway(self, op: ops.HoldGateway) -> None:
        """Hold new requests at the gateway pod and let the ones in flight finish (counted)."""
        self.hold = kube_hold(self.kubectl, self.stack, self.say)
        going_on = "; streams go on on the new variant" if op.continue_streams else ""
        self.say(f"draining the gateway: new requests wait, requests in flight finish{going_on}")
        drained = self.hold.begin(op.continue_streams)
        self.timings["drain"] = drained.seconds
        self.held = {
            "finished": drained.drained,
            "cut": drained.cut,
            "continued": drained.continued,
            "refused": drained.refused,
        }

    def release_gateway(self, _: ops.ReleaseGateway) -> None:
        """The held requests flow to whatever serves now (a stop signal cannot cut it short)."""
        if self.hold is None:
            return
        with interrupts_ignored():
            began = time.monotonic()
            note = self.hold.end()
            self.hold = None
            self.timings["release"] = time.monotonic() - began
        if note:
            self.notes.append(note)

    def publish(self, op: ops.Publish) -> None:
        """Tell the gateway pod the upstreams it routes among (each variant's Service)."""
        if not self.stack.gateway.enabled:
            return
        if self.control is None:
            self.control = kube_control(self.kubectl, self.stack)
        set_upstreams(self.control, [dict(u) for u in op.upstreams])

    def drain(self, op: ops.DrainMember) -> None:
        if self.control is not None:
            self.drained.member(self.control, self.stack, op)

    def drain_single(self, op: ops.DrainSingle) -> None:
        if self.control is not None:
            where = f"deployment/{op.container}"
            self.drained.single(self.control, self.stack, self.waiting, where)

    # -- the members ----------------------------------------------------------------------
    def _single(self, member: ops.Member) -> bool:
        """The one-variant Deployment (`up VARIANT`'s), not a live member."""
        return member.container == self.stack.service

    def start_member(self, op: ops.StartMember | ops.Reapply | ops.Roll) -> None:
        """kubectl apply -k of the member's kustomization, then its rollout status."""
        member = op.member
        if not member.run_file:
            raise SwapFailed(f"{member.name} has no manifests to apply from")
        self.began[member.name] = time.monotonic()
        self.say(f"applying {member.variant} (kubectl apply -k {member.run_file})")
        self.applied = False
        self.kubectl.run(["apply", "--kustomize", member.run_file], timeout=120)
        self.applied = True
        self.say(
            f"waiting for {member.container} (kubectl rollout status, up to {self.options.timeout:.0f}s)"
        )
        rollout_status(self.kubectl, self.stack, self.options.timeout, member.container)

    def roll_back(self, op: ops.RollBack) -> None:
        """`kubectl rollout undo` and its rollout status; nothing when the apply it undoes
        changed nothing (undoing then would go back one revision too far)."""
        if self.unchanged and self._single(op.member):
            return
        self.say(f"rolling {op.member.variant} back (kubectl rollout undo)")
        self.kubectl.run(["rollout", "undo", f"deployment/{op.member.container}"])
        rollout_status(self.kubectl, self.stack, self.options.timeout, op.member.container)

    def gate_member(self, op: ops.GateMember) -> None:
        """The readiness gate and warm-up through the member's own Service (the shared one for
        the one-variant Deployment) within the timeout from its apply; a speculative variant's
        acceptance too."""
        member = op.member
        began = self.began.get(member.name, time.monotonic())
        self.say(f"{member.variant} rolled out; gating it through service/{member.service}")
        warmup = self.stack.gateway.warmup_requests if self.stack.gateway.enabled else 0
        if member.speculative:  # the acceptance check's completions count as warm-up
            warmup = max(0, warmup - ACCEPTANCE_WARMUP_REQUESTS)
        gate(
            self.kubectl,
            self.stack,
            self.stack.served_model_name,
            max(began + self.options.timeout, time.monotonic() + 5),
            self.waiting,
            self.hold.headers if self.hold is not None else (),
            warmup=warmup,
            service=None if self._single(member) else (member.service, CONTAINER_PORT),
            check=(lambda url: self._acceptance(member.variant, url)) if member.speculative else None,
        )
        self.timings[f"{member.variant} apply_to_ready"] = time.monotonic() - began

    def _acceptance(self, name: str, url: str) -> None:
        """A speculative variant's draft acceptance through its own Service (HealthCheckFailed
        at or below `stack.acceptance_floor`: it would decode slower than the baseline)."""
        target = ForwardedTarget(
            name, CONTAINER_PORT, "127.0.0.1", self.stack.served_model_name, self.stack.api_key, forwarded=url
        )
        rate = live_acceptance(target, self.stack.acceptance_floor)
        self.say(f"{name} accepts {rate:.2f} of its draft tokens")

    def stop_member(self, op: ops.StopMember) -> None:
        """Delete the member's Deployment and Service (the one-variant Deployment alone: the
        shared Service stays); its pods get their grace period."""
        member = op.member
        objects = [f"deployment/{member.container}"]
        objects += [] if self._single(member) else [f"service/{member.service}"]
        self.say(f"deleting deployment/{member.container}")
        self.kubectl.run(
            ["delete", *objects, "--ignore-not-found"],
            timeout=max(120.0, self.stack.stop_grace_period + 60.0),
        )

    def keep_log(self, op: ops.Op, _err: BaseException) -> None:
        """A member that failed to roll out or pass its gate: its pod log, read before the undo
        (a Roll whose apply did not finish first asks whether it changed the Deployment)."""
        self.failed_at = op
        if isinstance(op, ops.Roll) and not self.applied:
            self.unchanged = not self._changed()
        if isinstance(op, ops.StartMember | ops.Reapply | ops.Roll | ops.GateMember) and not self.unchanged:
            self.log = _log_tail(self.kubectl, self.stack, op.member.container)

    def _changed(self) -> bool:
        """True when the one-variant Deployment no longer runs what it ran before the switch."""
        try:
            now = serving(self.kubectl, self.stack)
        except KubectlFailed:
            return True  # the cluster cannot say: try the undo, which reports its own failure
        before = self.before
        return now is not None and (before is None or now.config_hash != before.config_hash)

    # -- around the plan ------------------------------------------------------------------
    def _bootstrap(self, folders: Mapping[str, Path], gateway: Manifest | None) -> Manifest | None:
        """Without a gateway Deployment: the stack-wide objects first (the gateway probes the
        set's Services itself until `up` tells it which ones passed their gate). Returns the
        gateway Deployment the cluster has now."""
        if gateway is not None or not self.stack.gateway.enabled:
            return gateway
        self.say(f"applying the shared Service and the gateway (kubectl apply -k {folders[SHARED]})")
        self.kubectl.run(["apply", "--kustomize", str(folders[SHARED])], timeout=120)
        rollout_status(self.kubectl, self.stack, self.options.timeout, gateway_name(self.stack))
        return dict(live_shared_docs(self.stack, list(self.variants))).get("gateway-deployment.yaml")

    def _record(self, folders: Mapping[str, Path], gateway: Manifest | None) -> None:
        """The gateway Deployment's upstream list follows the set (its new pod is ready before
        the old one stops), so a restarted gateway pod routes to the same set."""
        if not self.stack.gateway.enabled:
            return
        docs = dict(live_shared_docs(self.stack, list(self.variants)))
        rendered = docs.get("gateway-deployment.yaml")
        if rendered is None or (gateway is not None and _gateway_env(gateway) == _gateway_env(rendered)):
            return
        self.say("recording the live set in the gateway's Deployment (its pod is replaced)")
        self._roll_gateway(str(folders[SHARED] / "gateway-deployment.yaml"))

    def _folders(self, names: Sequence[str], cluster: ClusterLive) -> dict[str, Path]:
        """The set's kustomizations, the leaving variants' and the one-variant Deployment's
        overlay (what an undo applies again)."""
        folders: dict[str, Path] = dict(write_live(self.stack, names, leaving=list(cluster.live)))
        if cluster.single and cluster.single in self.stack.variants:
            folders[SINGLE] = write_overlay(self.stack, resolve_target(self.stack, cluster.single))
        return folders

    def _run(self, planned: Sequence[ops.Op], stage: Say = _quiet) -> list[ops.Op]:
        """`composer.swap.execute` with this dispatch table; a failure carries the pod log read
        before the undo."""
        try:
            return execute(
                planned,
                self.handlers(),
                rollback=self.options.rollback,
                say=self.say,
                failed=self.keep_log,
                stage=stage,
            )
        except SwapFailed as err:
            if self.log and not err.log_tail:
                err.log_tail, err.hints = self.log, hints(self.log)
            raise

    def up_single(self, target: Target) -> KubeUpResult:
        """Switch the one-variant Deployment to `target` (`plan_kube_single`)."""
        began = time.monotonic()
        self.before = before = serving(self.kubectl, self.stack)
        result = KubeUpResult(variant=target.name, outcome="started", previous=before and before.variant)
        overlay = write_overlay(self.stack, target)
        apply_secret(self.kubectl, self.stack)
        same = before is not None and before.config_hash == target.hash
        gateway = gateway_deployment(self.kubectl, self.stack) if target.gateway and not same else None
        rendered = overlay.parent.parent / "base" / "gateway-deployment.yaml"
        changed = gateway is not None and config_hash(gateway) != config_hash(read_manifest(rendered))
        planned = plan_kube_single(
            self.stack,
            target.name,
            overlay,
            target.hash,
            before,
            hold=gateway is not None,
            gateway_file=str(rendered) if changed else None,
            continue_streams=self.stack.gateway.continues(self.options.drain),
        )
        try:
            self._run(planned)
        except SwapFailed as err:
            raise self._single_failed(target.name, planned, err) from err.__cause__
        result.timings.update(self.timings)
        result.notes += self.notes
        result.drained = self.held
        if self.held and self.held["cut"]:
            result.warnings.append(
                f"{self.held['cut']} request(s) still running after the drain timeout "
                f"({self.stack.gateway.drain_timeout}s) were cut"
            )
        result.outcome = "unchanged" if same else "started"
        if same:
            result.notes.append(f"{target.name} already served with the same configuration")
        result.timings["total"] = time.monotonic() - began
        return result

    def _single_failed(self, name: str, planned: Sequence[ops.Op], err: SwapFailed) -> SwapFailed:
        """The switch's error in its own words: what the undo did to the Deployment."""
        roll = next(op for op in planned if isinstance(op, ops.Roll))
        rolled = self.failed_at is not None and planned.index(self.failed_at) >= planned.index(roll)
        back = roll.previous.variant if roll.previous is not None else ""
        if not rolled or self.unchanged:
            why = "nothing was changed"
        elif not self.options.rollback:
            why = "not rolled back (--no-rollback)"
        elif not back:
            why = "not rolled back (no earlier revision to go back to)"
        elif err.rolled_back:
            why = f"rolled back to {back}"
        else:
            why = f"the rollback to {back} failed too: {str(err).partition('; the undo failed too: ')[2]}"
        undone = err.rolled_back and rolled and bool(back) and not self.unchanged
        cause = _cause(err.__cause__ or err)
        return SwapFailed(f"{name} failed: {cause}; {why}", err.log_tail, err.hints, rolled_back=undone)

    def up_live(self, requested: Sequence[str]) -> LiveResult:
        began = time.monotonic()
        cluster = read_cluster(self.kubectl, self.stack)
        names = live_set_names(requested, self.stack, cluster)
        live_members(self.stack, names)  # the joined set's GPU sets: refused before any change
        self.variants = tuple(names)
        wanted = {
            name: identity(dict(live_member_docs(self.stack, name))[f"deployment-{name}.yaml"])
            for name in names
        }
        folders = self._folders(names, cluster)
        continues = self.stack.gateway.continues(self.options.drain)
        plan = plan_kube_live(self.stack, names, wanted, cluster, folders, continue_streams=continues)
        result = LiveResult(variant="+".join(names), outcome="unchanged", plan=plan.as_data())
        result.plan_text = plan.describe()
        apply_secret(self.kubectl, self.stack)
        gateway = gateway_deployment(self.kubectl, self.stack) if self.stack.gateway.enabled else None
        gateway = self._bootstrap(folders, gateway)
        if plan.no_op:
            self.publish(ops.Publish(plan.upstreams, ()))  # a restarted gateway pod may route to an older set
        else:
            record = plan.recording(self.stack.project, self.options.timeout)
            try:
                ran = self._run(plan.ops, record.stage)
            except SwapFailed as err:
                result.timings.update(self.timings)
                live_history(self.stack, plan, "failed", result, err)
                raise
            finally:
                record.close()
            with interrupts_ignored():  # the set serves: its record is finished
                self._record(folders, gateway)
        result.timings.update(self.timings)
        self.drained.report(result)
        if plan.no_op:
            result.notes.append(f"the live set {{{', '.join(names)}}} already runs on Kubernetes")
        else:
            result.outcome = f"live set {', '.join(names)}"
            live_history(self.stack, plan, result.outcome, result, ran=ran)
        result.timings["total"] = time.monotonic() - began
        return result


def _placed_by_the_scheduler(_: ops.AwaitRelease) -> None:
    """Kubernetes places pods on free GPUs itself: there is no release to wait for."""


def _cause(err: BaseException) -> str:
    """An error as one line: interrupted, our own messages as they are, others with their type."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return str(err) if isinstance(err, ComposerError) else f"unexpected {type(err).__name__}: {err}"


def _locked(
    stack: Stack, kubectl: Kubectl | None, options: KubeUpOptions | None, progress: Say, waiting: Say | None
) -> tuple[KubeRollout, AbstractContextManager[object]]:
    """The executor and the project's swap lock to run it under (a missing API key is refused
    first: a configuration error never waits for another swap's lock)."""
    options = options or KubeUpOptions()
    if not stack.api_key:
        raise PreflightFailed(NO_KEY)
    runner = KubeRollout(stack, kubectl or Kubectl.for_stack(stack), options, progress, waiting or progress)
    return runner, swap_lock(stack.project, options.wait_for_lock, progress)


def up_kubernetes(
    stack: Stack,
    target: Target,
    *,
    kubectl: Kubectl | None = None,
    options: KubeUpOptions | None = None,
    progress: Say = _quiet,
    waiting: Say | None = None,
) -> KubeUpResult:
    """Switch the cluster's one-variant Deployment to `target` under the project's swap lock;
    raise SwapFailed (after undoing, unless --no-rollback) on failure, caused by
    KeyboardInterrupt when interrupted."""
    runner, lock = _locked(stack, kubectl, options, progress, waiting)
    with lock:
        return runner.up_single(target)


def up_kube_live(
    stack: Stack,
    requested: Sequence[str],
    *,
    kubectl: Kubectl | None = None,
    options: KubeUpOptions | None = None,
    progress: Say = _quiet,
    waiting: Say | None = None,
) -> LiveResult:
    """Change the cluster's live set under the project's swap lock; raise SwapFailed (after
    undoing what ran, unless --no-rollback) on failure."""
    if len(requested) > 1:
        live_members(stack, requested)  # overlapping GPU sets: refused before kubectl is asked
    runner, lock = _locked(stack, kubectl, options, progress, waiting)
    with lock:
        return runner.up_live(requested)
