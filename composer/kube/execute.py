"""The one Kubernetes executor: the plans (`composer.swap.ops`) of the one-variant switch
(`plan_kube_single`: UpdateGateway when the gateway changes, Hold through `kubectl exec`, Reapply (Recreate),
Gate through the shared Service, Release), of a live set's change (`plan_kube_live`:
Docker's live operations on members `VARIANT/1`, a changed Deployment applied in place) and of
`up X` on a running live set (Docker's `plan_alone`, the gateway's Deployment rolled last), run
by `composer.swap.execute` with one kubectl dispatch table under the swap lock, after ONE read
of the cluster and the desired set decided from it (`composer.swap.desired`, as on Docker).
The undo of Reapply is `kubectl rollout undo`; a hold is released even with
`--no-rollback`; the failed member's pod log is read before the undo.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from composer import labels
from composer.engine.diagnose import hints
from composer.errors import KubectlFailed, PreflightFailed, SwapFailed
from composer.gateway.host.client import GatewayControl
from composer.kube.control import kube_control
from composer.kube.kubectl import Kubectl
from composer.kube.rollout import (
    ForwardedTarget,
    Serving,
    apply_secret,
    deployment,
    gate,
    pod_labels,
    pod_log_tail,
    rollout_status,
    write_overlay,
)
from composer.render.files import RenderedFile, write_atomic
from composer.render.kube_live import live_member_docs, live_name, live_shared_docs
from composer.render.kubernetes import (
    GENERATED,
    Manifest,
    dump,
    gateway_name,
    kustomization_of,
    selector_labels,
)
from composer.render.live import LIVE_UPSTREAMS_VAR
from composer.render.runfiles import state_dir
from composer.render.spec import API_KEY_VAR, CONTAINER_PORT
from composer.render.target import Target, resolve_target
from composer.signals import interrupts_ignored
from composer.stack.model import Stack
from composer.stack.placement import live_members
from composer.swap import ops, runner
from composer.swap.desired import EXCLUSIVE, check_request, desired
from composer.swap.execute import Cases, Handlers, Say, Undone, explain_failure, reason
from composer.swap.holding import SwapHold
from composer.swap.journal import SwapRecord
from composer.swap.lock import swap_lock
from composer.swap.outcome import UpOptions, UpResult
from composer.swap.plan import Plan, live_operations, plan_alone
from composer.swap.runner import Change
from composer.swap.snapshot import LiveRunning
from composer.swap.standby import ACCEPTANCE_WARMUP_REQUESTS
from composer.swap.transaction import DrainTally, live_acceptance, set_upstreams

NO_KEY = f"{API_KEY_VAR} is not set: set it in .env (the Deployment reads it from a Secret)"
SHARED = "shared"
SINGLE = "single"  # the one-variant Deployment's overlay, where an undo applies it again
LIVE_PREFIX = "live-"
CHANGED = "its configuration changed"  # why the one-variant switch rolls the gateway first


@dataclass(frozen=True)
class ClusterLive:
    """The project's server Deployments: each live variant's `identity`, and the one-variant
    Deployment's variant (None: no such Deployment; "": its variant cannot be read)."""

    live: Mapping[str, str]
    single: str | None = None
    serving: Serving | None = None  # the one-variant Deployment's variant and configuration


def identity(doc: Manifest) -> str:
    """A rendered live Deployment's configuration hash, stamped on it (`labels.LIVE_CONFIG`):
    the API server rewrites what it stores, so the cluster's copy is never compared itself."""
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
    live: dict[str, str] = {}
    single = now = None
    for doc in items:
        name = (doc.get("metadata") or {}).get("name", "")
        template = pod_labels(doc)
        variant = template.get(labels.VARIANT, "")
        if name == stack.service:
            single = str(variant)
            now = Serving(variant or None, template.get(labels.CONFIG_HASH))
        elif variant in stack.variants and name == live_name(stack, variant):
            notes = (doc.get("metadata") or {}).get("annotations") or {}
            live[variant] = str(notes.get(labels.LIVE_CONFIG, ""))
    return ClusterLive(live, single, now)


def plan_kube_live(
    stack: Stack,
    variants: Sequence[str],
    wanted: Mapping[str, str],
    cluster: ClusterLive,
    folders: Mapping[str, Path] | None = None,
    *,
    continue_streams: bool = True,
    gateway_file: str | None = None,
) -> Plan:
    """Decide the change (pure): `wanted` is each variant's rendered identity, `folders` the
    kustomization each variant (and `SINGLE`) applies from; a changed variant is applied in
    place. `gateway_file`: the gateway Deployment whose upstream list differs from the
    cluster's, rolled last (UpdateGateway), so a restarted gateway pod routes to the set."""
    folders = folders or {}
    new = {f"{v}/1": kube_member(stack, v, folders) for v in variants}
    old = {
        f"{v}/1": kube_member(stack, v, folders)
        for v in (*stack.variants, *cluster.live)
        if v in cluster.live
    }
    keep = tuple(n for n, m in new.items() if cluster.live.get(m.variant) == wanted[m.variant])
    alone = None
    if cluster.single is not None:
        single = cluster.single or stack.service
        file = str(folders.get(SINGLE, ""))
        alone = ops.Member(single, single, stack.service, stack.service, file, "-", False)
    planned = live_operations(new, old, keep, alone, continue_streams=continue_streams, in_place=True)
    if planned and gateway_file:
        why = "its settings name the set's members"
        planned = (*planned, ops.UpdateGateway("replace", gateway_file, why))
    before = sorted({*old, *([alone.variant] if alone is not None else [])})
    return Plan(tuple(before), tuple(new), planned)


def kube_member(stack: Stack, variant: str, folders: Mapping[str, Path]) -> ops.Member:
    """A live variant's member: its Deployment, applied from its folder in `folders`."""
    deployment = live_name(stack, variant)
    speculative = variant in stack.variants and stack.variant(variant).speculative is not None
    return ops.Member(
        f"{variant}/1", variant, deployment, deployment, str(folders.get(variant, "")), "-", speculative
    )


def plan_kube_single(
    stack: Stack,
    variant: str,
    overlay: Path,
    config_hash: str,
    before: Serving | None,
    *,
    hold: bool,
    gateway_file: str | None = None,
    continue_streams: bool = False,
) -> Plan:
    """The switch of the one-variant Deployment to `variant` at `config_hash` (pure): `before`
    is what it runs now (None: nothing yet), `hold` whether the gateway holds and drains around
    it, `gateway_file` the gateway Deployment to roll first when the gateway itself changes."""
    deployment = stack.service
    member = ops.Member(variant, variant, deployment, deployment, str(overlay))
    previous = None
    if before is not None and before.config_hash != config_hash:
        name = before.variant or deployment
        previous = ops.Member(name, name, deployment, deployment, "")
    gateway = [ops.UpdateGateway("replace", gateway_file, CHANGED)] if hold and gateway_file else []
    planned: list[ops.Op] = [*gateway]
    planned += [ops.Hold(variant, continue_streams=continue_streams)] if hold else []
    planned += [ops.Reapply(member, previous, recreate=True), ops.Gate(member, live=True)]
    planned += [ops.Release(variant)] if hold else []
    serving = (before.variant,) if before is not None and before.variant else ()
    return Plan(serving, (variant,), tuple(planned))


def write_live(stack: Stack, variants: Sequence[str], leaving: Sequence[str]) -> dict[str, Path]:
    """The set's kustomizations under the state folder: `shared` (the shared Service, the
    gateway, the base's extras) and one per variant, the `leaving` ones' too (for an undo)."""
    groups: dict[str, list[tuple[str, Manifest]]] = {SHARED: live_shared_docs(stack, list(variants))}
    for name in (*variants, *(n for n in leaving if n in stack.variants and n not in variants)):
        groups[name] = [
            (file, stamped(doc) if doc["kind"] == "Deployment" else doc)
            for file, doc in live_member_docs(stack, name)
        ]
    texts = {(group, file): dump(doc, GENERATED) for group, docs in groups.items() for file, doc in docs}
    digest = hashlib.sha256(json.dumps(sorted(texts.items())).encode()).hexdigest()[:12]
    out = state_dir() / stack.project / "kubernetes" / f"{LIVE_PREFIX}{digest}"
    folders: dict[str, Path] = {}
    for group, docs in groups.items():
        folder = out / group
        kustomization = kustomization_of([file for file, _ in docs], stack.kubernetes.namespace)
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


class KubeRollout:
    """One change of what serves on the cluster, and the dispatch table of both plans."""

    control: GatewayControl | None = None
    hold: SwapHold | None = None

    def __init__(self, stack: Stack, kubectl: Kubectl, options: UpOptions, progress: Say, waiting: Say):
        self.stack = stack
        self.kubectl = kubectl
        self.options = options
        self.say = progress
        self.waiting = waiting
        self.timings: dict[str, float] = {}
        self.record: SwapRecord | None = None
        self.began: dict[str, float] = {}  # when each member's apply began (its gate's deadline)
        self.log = ""  # the pod log of the member that failed, read before the undo
        self.drained = DrainTally()
        self.held: dict[str, int] | None = None  # what the one-variant switch's drain counted
        self.notes: list[str] = []
        self.before: Serving | None = None  # what the one-variant Deployment ran before
        self.applied = False  # the last apply -k finished
        self.unchanged = False  # a Recreate rollout that failed left the Deployment as it was
        self.failed_at: ops.Op | None = None

    def handlers(self) -> Handlers:
        return {
            ops.UpdateGateway: Cases({"replace": self.update_gateway}),
            ops.Hold: self.hold_gateway,
            ops.Release: self.release_gateway,
            ops.Start: Cases({"start": self.start_member}),
            ops.Reapply: self.start_member,
            ops.RollBack: self.roll_back,
            ops.Gate: self.gate_member,
            ops.Publish: self.publish,
            ops.Drain: self.drain,
            ops.Stop: Cases({"stop": self.stop_member}),
            ops.AwaitRelease: lambda _: None,  # the scheduler places pods on free GPUs itself
        }

    def update_gateway(self, op: ops.UpdateGateway) -> None:
        if not self.stack.gateway.enabled:
            return
        what = f"rolling the gateway ({op.why})"
        what = "the gateway itself changes: rolling it first" if op.why == CHANGED else what
        self.say(f"{what} (its new pod is ready before the old one stops)")
        self.kubectl.run(["apply", "--filename", op.run_file], timeout=120)
        rollout_status(self.kubectl, gateway_name(self.stack), self.options.timeout)

    def hold_gateway(self, op: ops.Hold) -> None:
        """Hold new requests at the gateway pod; let the ones in flight finish (counted)."""
        control = kube_control(self.kubectl, self.stack)
        self.hold = SwapHold(
            control, self.stack.gateway.drain_timeout, self.say, context=self.stack.max_model_len
        )
        going_on = "; streams go on on the new variant" if op.continue_streams else ""
        self.say(f"draining the gateway: new requests wait, requests in flight finish{going_on}")
        drained = self.hold.begin(op.continue_streams)
        self.timings["drain"] = drained.seconds
        self.held = dict(
            finished=drained.drained, cut=drained.cut, continued=drained.continued, refused=drained.refused
        )

    def release_gateway(self, _: ops.Release | None = None) -> None:
        """The held requests flow to whatever serves now (stop signals ignored meanwhile)."""
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
        """Tell the gateway pod the upstreams it routes among."""
        if not self.stack.gateway.enabled:
            return
        if self.control is None:
            self.control = kube_control(self.kubectl, self.stack)
        set_upstreams(self.control, [dict(u) for u in op.upstreams], op.single)

    def drain(self, op: ops.Drain) -> None:
        if self.control is not None:
            self.drained.drain(self.control, self.stack, self.waiting, op, f"deployment/{op.name}")

    def _single(self, member: ops.Member) -> bool:
        """The one-variant Deployment (`up VARIANT`'s), not a live member."""
        return member.container == self.stack.service

    def start_member(self, op: ops.Start | ops.Reapply) -> None:
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
        rollout_status(self.kubectl, member.container, self.options.timeout)

    def roll_back(self, op: ops.RollBack) -> None:
        """`kubectl rollout undo` and its rollout status; nothing when the apply changed nothing
        (the undo would go back one revision too far)."""
        if self.unchanged and self._single(op.member):
            return
        self.say(f"rolling {op.member.variant} back (kubectl rollout undo)")
        self.began[op.member.name] = time.monotonic()  # the gate after it has the whole timeout
        self.kubectl.run(["rollout", "undo", f"deployment/{op.member.container}"])
        rollout_status(self.kubectl, op.member.container, self.options.timeout)

    def gate_member(self, op: ops.Gate) -> None:
        """The gate and warm-up through the member's Service within the timeout from its apply;
        a speculative variant's acceptance too."""
        member = op.member
        began = self.began.pop(member.name, time.monotonic())
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
        """A speculative variant's draft acceptance (HealthCheckFailed at or below the floor)."""
        target = ForwardedTarget(
            name, CONTAINER_PORT, "127.0.0.1", self.stack.served_model_name, self.stack.api_key, forwarded=url
        )
        rate = live_acceptance(target, self.stack.acceptance_floor)
        self.say(f"{name} accepts {rate:.2f} of its draft tokens")

    def stop_member(self, op: ops.Stop) -> None:
        """Delete the member's Deployment and Service (the shared Service stays)."""
        member = op.member
        objects = [f"deployment/{member.container}"]
        objects += [] if self._single(member) else [f"service/{member.service}"]
        self.say(f"deleting deployment/{member.container}")
        self.kubectl.run(
            ["delete", *objects, "--ignore-not-found"],
            timeout=max(120.0, self.stack.stop_grace_period + 60.0),
        )

    # -- the run's moments (`composer.swap.runner`) ---------------------------------------
    def failed(self, plan: Plan, op: ops.Op, _err: BaseException) -> None:
        """Read the failed member's pod log before the undo (after a Recreate rollout whose apply did not
        finish, only when it changed the Deployment)."""
        self.failed_at = op
        if (
            isinstance(op, ops.Reapply) and op.recreate and not self.applied
        ):  # does the Deployment run what it ran?
            try:
                doc = deployment(self.kubectl, self.stack.service)
                now = pod_labels(doc).get(labels.CONFIG_HASH) if doc is not None else None
                self.unchanged = doc is None or (self.before is not None and now == self.before.config_hash)
            except KubectlFailed:  # the cluster cannot say: try the undo, which reports its own failure
                self.unchanged = False
        if isinstance(op, ops.Start | ops.Reapply | ops.Gate) and not self.unchanged:
            self.log = pod_log_tail(self.kubectl, self.stack, op.member.container)

    def explain(self, plan: Plan, err: BaseException, ran: list[ops.Op], undone: Undone | None) -> SwapFailed:
        """The error, with the failed pod's log; a switch's in its own words (what the undo did
        to the Deployment)."""
        failure = explain_failure(err, ran, undone)
        if self.log and not failure.log_tail:
            failure.log_tail, failure.hints = self.log, hints(self.log)
        return self._single_failed(plan, failure, err) if plan.single else failure

    def finish(self, plan: Plan, failure: SwapFailed | None, result: UpResult) -> None:
        """A hold never outlasts `up` (--no-rollback or not); what the drains counted."""
        if failure is not None:
            self.release_gateway()
        result.notes += self.notes
        if not plan.single:
            self.drained.report(result)
            return
        result.drained = self.held
        if failure is None and self.held and self.held["cut"]:
            result.warnings.append(
                f"{self.held['cut']} request(s) still running after the drain timeout "
                f"({self.stack.gateway.drain_timeout}s) were cut"
            )

    def _change(
        self, plan: Plan, result: UpResult, kind: str = "live", began: float | None = None
    ) -> UpResult:
        """Run `plan` through the one runner (the result says what it planned; `result.outcome`
        what the history says once it ran)."""
        result.plan, result.plan_text = plan.as_data(), plan.describe()
        options = self.options
        change = Change(self.stack.project, kind, options.rollback, options.timeout, self.say, options.by)
        runner.run(plan, self, result, change, began)
        return result

    def up_single(self, target: Target, before: Serving | None) -> UpResult:
        """Switch the one-variant Deployment to `target` (`plan_kube_single`) from `before`,
        what it runs now (None: there is none)."""
        began = time.monotonic()
        self.before = before
        result = UpResult(variant=target.name, outcome="started", previous=before and before.variant)
        overlay = write_overlay(self.stack, target)
        apply_secret(self.kubectl, self.stack)
        same = before is not None and before.config_hash == target.hash
        holds = target.gateway is not None and not same
        gateway = deployment(self.kubectl, gateway_name(self.stack)) if holds else None
        rendered = overlay.parent.parent / "base" / "gateway-deployment.yaml"
        changed = gateway is not None and (
            pod_labels(gateway).get(labels.CONFIG_HASH, "")
            != pod_labels(yaml.safe_load(rendered.read_text())).get(labels.CONFIG_HASH, "")
        )
        plan = plan_kube_single(
            self.stack,
            target.name,
            overlay,
            target.hash,
            before,
            hold=gateway is not None,
            gateway_file=str(rendered) if changed else None,
            continue_streams=self.stack.gateway.continues(self.options.drain),
        )
        result.outcome = "unchanged" if same else "started"
        self._change(plan, result, "up", began)
        if same:
            result.notes.append(f"{target.name} already served with the same configuration")
        return result

    def _single_failed(self, plan: Plan, err: SwapFailed, cause: BaseException) -> SwapFailed:
        """The switch's error in its own words: what the undo did to the Deployment."""
        name, planned = plan.target, plan.ops
        roll = next(op for op in planned if isinstance(op, ops.Reapply) and op.recreate)
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
        said = f"{name} failed: {reason(cause)}; {why}"
        return SwapFailed(said, err.log_tail, err.hints, rolled_back=undone)

    def up_live(self, names: Sequence[str], cluster: ClusterLive) -> UpResult:
        """Change the live set to `names` (`plan_kube_live`); the gateway's Deployment records it."""
        live_members(self.stack, names)  # the set's GPU sets: refused before any change
        wanted = {
            name: identity(dict(live_member_docs(self.stack, name))[f"deployment-{name}.yaml"])
            for name in names
        }
        folders = write_live(self.stack, names, list(cluster.live))
        if cluster.single and cluster.single in self.stack.variants:  # what an undo applies again
            folders[SINGLE] = write_overlay(self.stack, resolve_target(self.stack, cluster.single))
        apply_secret(self.kubectl, self.stack)
        gateway = deployment(self.kubectl, gateway_name(self.stack)) if self.stack.gateway.enabled else None
        rendered = dict(live_shared_docs(self.stack, list(names))).get("gateway-deployment.yaml")
        if gateway is None and self.stack.gateway.enabled:  # without one, the stack-wide objects first
            self.say(f"applying the shared Service and the gateway (kubectl apply -k {folders[SHARED]})")
            self.kubectl.run(["apply", "--kustomize", str(folders[SHARED])], timeout=120)
            rollout_status(self.kubectl, gateway_name(self.stack), self.options.timeout)
            gateway = rendered
        recorded = (
            gateway is not None and rendered is not None and _gateway_env(gateway) == _gateway_env(rendered)
        )
        record = None if rendered is None or recorded else str(folders[SHARED] / "gateway-deployment.yaml")
        continues = self.stack.gateway.continues(self.options.drain)
        plan = plan_kube_live(
            self.stack, names, wanted, cluster, folders, continue_streams=continues, gateway_file=record
        )
        if plan.no_op:  # a restarted gateway pod may route to an older set
            self.publish(ops.Publish(tuple(kube_member(self.stack, v, {}).upstream() for v in names), ()))
        return self._live(plan, f"live set {', '.join(names)}")

    def up_alone(self, target: Target, cluster: ClusterLive) -> UpResult:
        """`up X` where a live set runs (Docker's `plan_alone`): X's one-variant Deployment
        replaces every live one; the gateway's Deployment is rolled last."""
        stack = self.stack
        folders = write_live(stack, (), list(cluster.live))  # what an undo applies again
        overlay = write_overlay(stack, target)
        speculative = target.variant.speculative is not None
        alone = ops.Member(
            target.name, target.name, stack.service, stack.service, str(overlay), "-", speculative
        )
        running = [  # each leaving one is applied again from its folder by an undo
            LiveRunning(f"{v}/1", v, name, "-", config, "running", name, run_file=str(folders[v]))
            for v, config in cluster.live.items()
            for name in [live_name(stack, v)]
        ]
        plan = plan_alone(
            alone,
            target.hash,
            running,
            stack.project,
            gateway_file=str(overlay.parent.parent / "base" / "gateway-deployment.yaml"),
            continue_streams=stack.gateway.continues(self.options.drain),
        )
        apply_secret(self.kubectl, stack)
        return self._live(plan, f"{target.name} serves alone (the live set left)")

    def _live(self, plan: Plan, outcome: str) -> UpResult:
        """A live plan's result: run (its outcome, once it ran), or already so."""
        result = UpResult(variant="+".join(plan.variants), outcome="unchanged")
        if plan.no_op:
            result.plan, result.plan_text = plan.as_data(), plan.describe()
            result.notes.append(f"the live set {{{', '.join(plan.variants)}}} already runs on Kubernetes")
            return result
        result.outcome = outcome
        return self._change(plan, result)


def up_kubernetes(
    stack: Stack,
    requested: Sequence[str],
    kubectl: Kubectl,
    options: UpOptions,
    progress: Say,
    waiting: Say,
) -> UpResult:
    """`up --target kubernetes` (see the module docstring): the one-variant switch (also a set
    of one where no live set runs), X replacing a live set, or a live set's change. SwapFailed
    (caused by KeyboardInterrupt when interrupted); ConfigError for a bad request."""
    check_request(requested, stack)  # unknown names, overlapping GPU sets: before kubectl is asked
    if not stack.api_key:  # a configuration error never waits for another swap's lock
        raise PreflightFailed(NO_KEY)
    runner = KubeRollout(stack, kubectl, options, progress, waiting)
    with swap_lock(stack.project, options.wait_for_lock, progress):
        cluster = read_cluster(runner.kubectl, stack)
        want = desired(requested, stack, [f"{v}/1" for v in cluster.live])
        if want.mode == EXCLUSIVE and want.replaces:
            return runner.up_alone(resolve_target(stack, want.variants[0]), cluster)
        if want.mode == EXCLUSIVE or (len(want.variants) == 1 and not cluster.live):
            return runner.up_single(resolve_target(stack, want.variants[0]), cluster.serving)
        return runner.up_live(want.variants, cluster)
