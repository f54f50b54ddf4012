"""Change a live set on Kubernetes with the plan and executor a Docker live set uses.

    take the project's swap lock -> read the live Deployments (`kubectl get deployments
    --selector`; each carries its configuration's identity, an annotation `up` stamps, and
    the one-variant Deployment its variant) -> write the set's manifests (a kustomization
    for the stack-wide objects, one per variant, one for each leaving variant so that an
    undo can apply it again) -> server-side apply the API key Secret -> without a gateway
    Deployment: apply the stack-wide objects first -> plan (`plan_kube_live`, pure: the
    typed operations of `composer.swap.live`, a changed variant applied in place) -> run
    them with `composer.swap.execute` and this dispatch table -> the gateway's Deployment
    records the new upstream list (a restarted gateway pod starts with it).

The operations on the cluster: StartMember is kubectl apply -k and rollout status;
GateMember the readiness gate and warm-up through the variant's own Service (port-forward)
and, for a speculative one, its draft acceptance from its own /metrics
(`composer.swap.live.live_acceptance`); Publish the gateway's upstreams (`kubectl exec`);
DrainMember and DrainSingle the gateway's drains; StopMember kubectl delete; Reapply a
changed Deployment rolled in place, undone by RollBack (`kubectl rollout undo`). A failure
or the first Ctrl-C, SIGTERM or SIGHUP runs the inverses of what ran, newest first (a new
variant is deleted again, a leaving one applied again), so the set that served serves on;
`--no-rollback` leaves what ran as it is.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from composer import labels
from composer.engine.diagnose import hints
from composer.engine.gate import GateTarget
from composer.errors import KubectlFailed, PreflightFailed, SwapFailed
from composer.gateway.client import GatewayControl
from composer.kube.control import kube_control
from composer.kube.kubectl import Kubectl
from composer.kube.rollout import (
    NO_KEY,
    KubeChange,
    KubeUpOptions,
    Say,
    _log_tail,
    _quiet,
    apply_secret,
    gate,
    rollout_status,
)
from composer.render.files import RenderedFile, write_atomic
from composer.render.kube_live import live_member_docs, live_name, live_shared_docs
from composer.render.kubernetes import (
    GENERATED,
    Manifest,
    _kustomization,
    dump,
    gateway_name,
    selector_labels,
)
from composer.render.live import LIVE_UPSTREAMS_VAR
from composer.render.runfiles import state_dir
from composer.render.spec import CONTAINER_PORT
from composer.signals import interrupts_ignored
from composer.stack.model import Stack
from composer.stack.placement import live_members
from composer.swap import ops
from composer.swap.execute import Handlers, execute
from composer.swap.live import (
    DrainTally,
    LivePlan,
    LiveResult,
    _operations,
    live_acceptance,
    live_history,
    set_upstreams,
)
from composer.swap.lock import swap_lock
from composer.swap.standby import ACCEPTANCE_WARMUP_REQUESTS

SHARED = "shared"
SINGLE = "single"  # the one-variant Deployment's overlay, where an undo applies it again
LIVE_PREFIX = "live-"


@dataclass(frozen=True)
class LiveDeployment:
    """A live variant's Deployment as the cluster has it: what identifies its configuration."""

    variant: str
    identity: str


@dataclass(frozen=True)
class ClusterLive:
    """The project's server Deployments on the cluster: the live ones by variant, and the
    variant of the one-variant Deployment (`up VARIANT`'s), None when there is none ("" when
    its variant cannot be read)."""

    live: Mapping[str, LiveDeployment]
    single: str | None = None


def identity(doc: Manifest) -> str:
    """A rendered live Deployment's configuration, as `up` stamps it on the Deployment
    (`labels.LIVE_CONFIG`): the API server rewrites what it stores (quantities, defaults),
    so the cluster's copy is never compared field by field."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def stamped(doc: Manifest) -> Manifest:
    """The Deployment with its identity annotation (a metadata change: no pod is replaced)."""
    meta = dict(doc["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), labels.LIVE_CONFIG: identity(doc)}
    return {**doc, "metadata": meta}


def read_cluster(kubectl: Kubectl, stack: Stack) -> ClusterLive:
    """The project's server Deployments (one `kubectl get deployments --selector`)."""
    selector = ",".join(f"{k}={v}" for k, v in selector_labels(stack).items())
    done = kubectl.run(["get", "deployments", "--selector", selector, "--output", "json"])
    try:
        items = json.loads(done.stdout).get("items") or []
    except (ValueError, AttributeError) as err:
        raise KubectlFailed("`kubectl get deployments` printed no Deployment list") from err
    live: dict[str, LiveDeployment] = {}
    single = None
    for doc in items:
        name = (doc.get("metadata") or {}).get("name", "")
        template = ((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}
        variant = (template.get("labels") or {}).get(labels.VARIANT, "")
        if name == stack.service:
            single = str(variant)
        elif variant in stack.variants and name == live_name(stack, variant):
            notes = (doc.get("metadata") or {}).get("annotations") or {}
            live[variant] = LiveDeployment(variant, str(notes.get(labels.LIVE_CONFIG, "")))
    return ClusterLive(live, single)


def ran_kube_live(stack: Stack, directory: Path | None = None) -> bool:
    """`up --target kubernetes` changed a live set of this project from this machine before:
    only then does a one-variant `up` ask the cluster whether a live set runs."""
    return any(((directory or state_dir()) / stack.project / "kubernetes").glob(f"{LIVE_PREFIX}*"))


def live_set_names(requested: Sequence[str], stack: Stack, cluster: ClusterLive) -> list[str]:
    """The live set `up` aims at: several names are the set; none is `[gateway] live` (else
    what runs); one name joins what runs (or `[gateway] live` when nothing live runs)."""
    if len(requested) > 1:
        return list(requested)
    base = [name for name in stack.variants if name in cluster.live] or list(stack.gateway.live)
    if not requested:
        return base
    return base if requested[0] in base else [*base, requested[0]]


def plan_kube_live(
    stack: Stack,
    variants: Sequence[str],
    wanted: Mapping[str, str],
    cluster: ClusterLive,
    folders: Mapping[str, Path] | None = None,
    *,
    continue_streams: bool = True,
) -> LivePlan:
    """Decide the change (pure): `wanted` is each variant's rendered identity, `folders` the
    kustomization each variant (or the one-variant Deployment, under its variant) applies
    from. The operations are the Docker live set's, on members named `VARIANT/1`; a variant
    whose identity changed is applied in place (a rolling update)."""
    folders = folders or {}

    def member(variant: str) -> ops.Member:
        deployment = live_name(stack, variant)
        speculative = variant in stack.variants and stack.variant(variant).speculative is not None
        return ops.Member(
            f"{variant}/1", variant, deployment, deployment, str(folders.get(variant, "")), "-", speculative
        )

    new = {f"{v}/1": member(v) for v in variants}
    old = {f"{v}/1": member(v) for v in stack.variants if v in cluster.live}
    old |= {f"{v}/1": member(v) for v in cluster.live if f"{v}/1" not in old}
    keep = tuple(
        n
        for n, m in new.items()
        if m.variant in cluster.live and cluster.live[m.variant].identity == wanted[m.variant]
    )
    alone = None
    if cluster.single is not None:
        single = cluster.single or stack.service
        file = str(folders.get(SINGLE, ""))
        alone = ops.Member(single, single, stack.service, stack.service, file, "-", False)
    plan = LivePlan.between(
        variants,
        list(new),
        set(old),
        keep,
        single=alone.variant if alone is not None else None,
        gpus=dict.fromkeys(new, "-"),
        upstreams=tuple(m.upstream() for m in new.values()),
    )
    planned = _operations(plan, new, old, alone, "", continue_streams=continue_streams, in_place=True)
    return replace(plan, ops=planned)


def write_live(
    stack: Stack, variants: Sequence[str], directory: Path | None = None, leaving: Sequence[str] = ()
) -> dict[str, Path]:
    """The set's kustomizations under the state folder: `shared` (the shared Service, the
    gateway and the base's extras) and one per variant (its Deployment and Service), the
    `leaving` variants' too (an undo applies them again, as the stack renders them now)."""
    groups: dict[str, list[tuple[str, Manifest]]] = {SHARED: live_shared_docs(stack, list(variants))}
    for name in (*variants, *(n for n in leaving if n in stack.variants and n not in variants)):
        groups[name] = [
            (file, stamped(doc) if doc["kind"] == "Deployment" else doc)
            for file, doc in live_member_docs(stack, name)
        ]
    texts = {(group, file): dump(doc, GENERATED) for group, docs in groups.items() for file, doc in docs}
    digest = hashlib.sha256(json.dumps(sorted(texts.items())).encode()).hexdigest()[:12]
    out = (directory or state_dir()) / stack.project / "kubernetes" / f"{LIVE_PREFIX}{digest}"
    folders: dict[str, Path] = {}
    for group, docs in groups.items():
        folder = out / group
        kustomization = _kustomization([file for file, _ in docs], stack.kubernetes.namespace)
        files = [RenderedFile(folder / "kustomization.yaml", dump(kustomization, GENERATED), 0o644)]
        files += [RenderedFile(folder / file, texts[(group, file)], 0o644) for file, _ in docs]
        for rendered in files:
            write_atomic(rendered)
        folders[group] = folder
    return folders


def _gateway_env(doc: Manifest) -> str | None:
    """The gateway Deployment's GATEWAY_LIVE_UPSTREAMS value (None without one)."""
    containers = ((doc.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or [{}]
    for var in containers[0].get("env") or []:
        if var.get("name") == LIVE_UPSTREAMS_VAR:
            return str(var.get("value"))
    return None


@dataclass(frozen=True)
class ForwardedTarget(GateTarget):
    """A variant reached through `kubectl port-forward`: `url` is the forward's own address
    (never a remote Docker engine's host, as a loopback GateTarget would become)."""

    forwarded: str = ""

    @property
    def url(self) -> str:
        return self.forwarded


class KubeLiveRollout(KubeChange):
    """One change of the cluster's live set: its methods are the executor's dispatch table."""

    control: GatewayControl | None = None
    variants: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timings: dict[str, float] = {}
        self.began: dict[str, float] = {}  # when each member's apply began (its gate's deadline)
        self.log = ""  # the pod log of the member that failed, read before the undo
        self.drained = DrainTally()

    def handlers(self) -> Handlers:
        return {
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
    def _gateway_doc(self) -> Manifest | None:
        """The gateway Deployment on the cluster (None when there is none)."""
        name = gateway_name(self.stack)
        done = self.kubectl.run(["get", f"deployment/{name}", "--ignore-not-found", "--output", "json"])
        if not done.stdout.strip():
            return None
        try:
            return dict(json.loads(done.stdout))
        except ValueError as err:
            raise KubectlFailed(f"`kubectl get deployment/{name}` printed no Deployment") from err

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

    def start_member(self, op: ops.StartMember | ops.Reapply) -> None:
        """kubectl apply -k of the member's kustomization, then its rollout status."""
        member = op.member
        if not member.run_file:
            raise SwapFailed(f"{member.name} has no manifests to apply from")
        self.began[member.name] = time.monotonic()
        self.say(f"applying {member.variant} (kubectl apply -k {member.run_file})")
        self.kubectl.run(["apply", "--kustomize", member.run_file], timeout=120)
        self.say(
            f"waiting for {member.container} (kubectl rollout status, up to {self.options.timeout:.0f}s)"
        )
        rollout_status(self.kubectl, self.stack, self.options.timeout, member.container)

    def roll_back(self, op: ops.RollBack) -> None:
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
        """A member that failed to roll out or pass its gate: its pod log, read before the undo."""
        if isinstance(op, ops.StartMember | ops.Reapply | ops.GateMember):
            self.log = _log_tail(self.kubectl, self.stack, op.member.container)

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
        self.kubectl.run(
            ["apply", "--filename", str(folders[SHARED] / "gateway-deployment.yaml")], timeout=120
        )
        rollout_status(self.kubectl, self.stack, self.options.timeout, gateway_name(self.stack))

    def _folders(self, names: Sequence[str], cluster: ClusterLive) -> dict[str, Path]:
        """The set's kustomizations, the leaving variants' and the one-variant Deployment's
        overlay (what an undo applies again)."""
        folders: dict[str, Path] = dict(write_live(self.stack, names, leaving=list(cluster.live)))
        if cluster.single and cluster.single in self.stack.variants:
            from composer.kube.rollout import write_overlay
            from composer.render.target import resolve_target

            folders[SINGLE] = write_overlay(self.stack, resolve_target(self.stack, cluster.single))
        return folders

    def up(self, requested: Sequence[str]) -> LiveResult:
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
        gateway = self._gateway_doc() if self.stack.gateway.enabled else None
        gateway = self._bootstrap(folders, gateway)
        if plan.no_op:
            self.publish(ops.Publish(plan.upstreams, ()))  # a restarted gateway pod may route to an older set
        else:
            record = plan.recording(self.stack.project, self.options.timeout)
            try:
                ran = execute(
                    plan.ops,
                    self.handlers(),
                    rollback=self.options.rollback,
                    say=self.say,
                    failed=self.keep_log,
                    stage=record.stage,
                )
            except SwapFailed as err:
                if self.log and not err.log_tail:
                    err.log_tail, err.hints = self.log, hints(self.log)
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
    options = options or KubeUpOptions()
    if not stack.api_key:
        raise PreflightFailed(NO_KEY)
    if len(requested) > 1:
        live_members(stack, requested)  # overlapping GPU sets: refused before kubectl is asked
    runner = KubeLiveRollout(
        stack, kubectl or Kubectl.for_stack(stack), options, progress, waiting or progress
    )
    with swap_lock(stack.project, options.wait_for_lock, progress):
        return runner.up(requested)
