"""Change a live set on Kubernetes one Deployment at a time, never leaving zero ready upstreams.

    take the project's swap lock -> read the live Deployments (`kubectl get deployments
    --selector`; each carries its configuration's identity, an annotation `up` stamps)
    -> plan (pure: keep, replace, start, stop) -> write the set's manifests
    (a kustomization for the stack-wide objects, one per variant) -> server-side apply the
    API key Secret -> without a gateway Deployment: apply the stack-wide objects first
    -> per new variant: kubectl apply -k, rollout status --timeout, the readiness gate and
    warm-up through its own Service (port-forward) and, for a speculative one, its draft
    acceptance from its own /metrics over a short warm-up (`composer.swap.live.live_acceptance`,
    the Docker live set's check) above `stack.acceptance_floor`, then add it to the gateway's
    upstreams (`upstreams` through `kubectl exec`) -> the one-variant Deployment, if any,
    drained (the gateway's requests in flight on it finish, or the drain timeout) and deleted
    -> per leaving variant: out of the upstreams, `drain-upstream` (its requests in
    flight finish), kubectl delete of its Deployment and Service -> the gateway's
    Deployment records the new upstream list (a restarted gateway pod starts with it).

A new variant that fails its rollout, its gate or its acceptance (or is interrupted) is deleted again and
the upstreams are left as they were: the variants already serving serve on. A variant whose
configuration changed is taken out of the upstreams (when others serve), drained,
re-applied and gated; on failure `kubectl rollout undo` brings its previous revision back.
The Docker counterpart is `composer.swap.live.LiveSwapper`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer import labels
from composer.engine.diagnose import hints
from composer.engine.gate import GateTarget
from composer.engine.retry import KUBE_CONTROL_INTERVAL_S
from composer.errors import ComposerError, GatewayControlError, KubectlFailed, PreflightFailed, SwapFailed
from composer.gateway.client import GatewayControl
from composer.kube.control import kube_control
from composer.kube.kubectl import Kubectl
from composer.kube.rollout import (
    NO_KEY,
    KubeChange,
    KubeUpOptions,
    Say,
    _cause,
    _log_tail,
    _quiet,
    apply_secret,
    gate,
    rollout_status,
)
from composer.render.files import RenderedFile, write_atomic
from composer.render.kube_live import live_member_docs, live_name, live_shared_docs, live_upstreams
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
from composer.signals import handled, interrupt_once, interrupts_ignored
from composer.stack.model import Stack
from composer.stack.placement import live_members
from composer.swap.live import LiveChange, LiveResult, live_acceptance, set_upstreams, upstream_states
from composer.swap.lock import swap_lock
from composer.swap.standby import ACCEPTANCE_WARMUP_REQUESTS

SHARED = "shared"
LIVE_PREFIX = "live-"


@dataclass(frozen=True)
class LiveDeployment:
    """A live variant's Deployment as the cluster has it: what identifies its configuration."""

    variant: str
    identity: str


@dataclass(frozen=True)
class ClusterLive:
    """The project's server Deployments on the cluster: the live ones by variant, and whether
    the one-variant Deployment (`up VARIANT`'s) is there too."""

    live: Mapping[str, LiveDeployment]
    single: bool


@dataclass(frozen=True)
class KubeLivePlan(LiveChange):
    """What a live-set change does on the cluster, in order."""

    single: bool = False

    @property
    def no_op(self) -> bool:
        return not (self.replace or self.start or self.stop or self.single)


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
    single = False
    for doc in items:
        name = (doc.get("metadata") or {}).get("name", "")
        template = ((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}
        variant = (template.get("labels") or {}).get(labels.VARIANT, "")
        if name == stack.service:
            single = True
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


def plan_kube_live(variants: Sequence[str], wanted: Mapping[str, str], cluster: ClusterLive) -> KubeLivePlan:
    """Decide the change (pure): `wanted` is each variant's rendered identity."""
    now = cluster.live
    keep = tuple(n for n in variants if n in now and now[n].identity == wanted[n])
    return KubeLivePlan.between(variants, variants, now, keep, single=cluster.single)


def write_live(stack: Stack, variants: Sequence[str], directory: Path | None = None) -> dict[str, Path]:
    """The set's kustomizations under the state folder: `shared` (the shared Service, the
    gateway and the base's extras) and one per variant (its Deployment and Service)."""
    groups: dict[str, list[tuple[str, Manifest]]] = {SHARED: live_shared_docs(stack, list(variants))}
    for name in variants:
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


def single_inflight(raw: Mapping[str, Any] | None) -> int:
    """The gateway's requests in flight on its single upstream (the one-variant Service): its
    own count (`single_outstanding`); from a gateway image without it, every forwarded request
    less those on live upstreams, members and leaving ones alike."""
    if raw is not None and "single_outstanding" in raw:
        return max(0, int(raw["single_outstanding"] or 0))
    live = sum(int(u.get("outstanding") or 0) for u in upstream_states(raw).values())
    return max(0, int((raw or {}).get("inflight") or 0) - live)


class KubeLiveRollout(KubeChange):
    """One change of the cluster's live set."""

    control: GatewayControl | None = None
    variants: tuple[str, ...] = ()
    continued = 0  # streams a leaving variant's drain sent on to the others
    refused = 0  # streams on a leaving variant that could not go on (they drained)

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

    def publish(self, variants: Sequence[str]) -> None:
        """Tell the gateway pod the variants it routes among (each one's Service)."""
        if not self.stack.gateway.enabled:
            return
        if self.control is None:
            self.control = kube_control(self.kubectl, self.stack)
        upstreams = live_upstreams(self.stack, list(variants))
        set_upstreams(self.control, upstreams)

    def drain(self, variant: str) -> int:
        """Wait until the gateway has no request in flight on `variant` (or the drain timeout);
        the requests still running then."""
        if self.control is None:
            return 0
        continues = self.stack.gateway.continues(self.options.drain)
        try:
            drained = self.control.drain_upstream(
                f"{variant}/1", self.stack.gateway.drain_timeout, continues, self.stack.max_model_len
            )
        except GatewayControlError:
            return 0
        self.continued += drained.continued
        self.refused += drained.refused
        return 0 if drained.done else drained.outstanding

    def drain_single(self) -> int:
        """Wait until the gateway has no request in flight on the one-variant Deployment (the
        live set takes the new ones) or the drain timeout; the requests still running then."""
        if self.control is None:
            return 0
        deadline = time.monotonic() + self.stack.gateway.drain_timeout
        while True:
            try:
                left = single_inflight(self.control.state().raw)
            except GatewayControlError:
                return 0
            if left == 0 or time.monotonic() >= deadline:
                return left
            self.waiting(f"draining deployment/{self.stack.service} ({left} in flight)")
            time.sleep(KUBE_CONTROL_INTERVAL_S)

    # -- steps ----------------------------------------------------------------------------
    def _roll(self, name: str, folder: Path) -> float:
        """Apply one variant's kustomization, wait for its rollout, gate it through its Service."""
        began = time.monotonic()
        deadline = began + self.options.timeout
        deployment = live_name(self.stack, name)
        self.say(f"applying {name} (kubectl apply -k {folder})")
        self.kubectl.run(["apply", "--kustomize", str(folder)], timeout=120)
        self.say(f"waiting for {deployment} (kubectl rollout status, up to {self.options.timeout:.0f}s)")
        rollout_status(self.kubectl, self.stack, self.options.timeout, deployment)
        self.say(f"{name} rolled out; gating it through service/{deployment}")
        warmup = self.stack.gateway.warmup_requests if self.stack.gateway.enabled else 0
        speculative = self.stack.variant(name).speculative is not None
        if speculative:  # the acceptance check's completions count as warm-up
            warmup = max(0, warmup - ACCEPTANCE_WARMUP_REQUESTS)
        gate(
            self.kubectl,
            self.stack,
            self.stack.served_model_name,
            max(deadline, time.monotonic() + 5),
            self.waiting,
            warmup=warmup,
            service=(deployment, CONTAINER_PORT),
            check=(lambda url: self._acceptance(name, url)) if speculative else None,
        )
        return time.monotonic() - began

    def _acceptance(self, name: str, url: str) -> None:
        """A speculative variant's draft acceptance through its own Service (HealthCheckFailed
        at or below `stack.acceptance_floor`: it would decode slower than the baseline)."""
        target = ForwardedTarget(
            name, CONTAINER_PORT, "127.0.0.1", self.stack.served_model_name, self.stack.api_key, forwarded=url
        )
        rate = live_acceptance(target, self.stack.acceptance_floor)
        self.say(f"{name} accepts {rate:.2f} of its draft tokens")

    def _log(self, name: str) -> str:
        """A failed variant's pod log tail (read before its Deployment is deleted or undone)."""
        return _log_tail(self.kubectl, self.stack, live_name(self.stack, name))

    def start(self, name: str, folder: Path, result: LiveResult) -> None:
        """Roll a new variant in; on failure delete it again (the others serve on) and raise."""

        def undo() -> str:
            self.delete(name)
            return "its Deployment and Service were deleted; the variants already live serve on"

        self._roll_in(
            name,
            folder,
            result,
            kept="left in place, out of the gateway's upstreams (--no-rollback)",
            undo=undo,
            undo_failed="deleting it failed too",
        )

    def _roll_in(
        self,
        name: str,
        folder: Path,
        result: LiveResult,
        kept: str,
        undo: Callable[[], str],
        undo_failed: str,
    ) -> None:
        """Apply and gate `name`; on failure read its log, then (unless --no-rollback: `kept`
        says what stays) `undo` it, and raise SwapFailed naming what was left."""
        try:
            result.timings[f"{name} apply_to_ready"] = self._roll(name, folder)
        except BaseException as err:
            with interrupts_ignored():
                log = self._log(name)
                if not self.options.rollback:
                    raise SwapFailed(f"{name} failed: {_cause(err)}; {kept}", log, hints(log)) from err
                try:
                    left = undo()
                except ComposerError as again:
                    left = f"{undo_failed}: {again}"
                raise SwapFailed(
                    f"{name} failed: {_cause(err)}; {left}", log, hints(log), rolled_back=True
                ) from err

    def replace(self, name: str, folder: Path, serving: list[str], result: LiveResult) -> int:
        """Re-apply a variant whose configuration changed: out of the upstreams and drained
        first when others serve; `kubectl rollout undo` and back in on failure."""
        others = [n for n in serving if n != name]
        cut = 0
        if others:
            self.publish(others)
            cut = self.drain(name)

        def undo() -> str:
            self.say(f"rolling {name} back (kubectl rollout undo)")
            deployment = live_name(self.stack, name)
            self.kubectl.run(["rollout", "undo", f"deployment/{deployment}"])
            rollout_status(self.kubectl, self.stack, self.options.timeout, deployment)
            self.publish(serving)
            return f"rolled {name} back to its previous revision"

        self._roll_in(
            name,
            folder,
            result,
            kept="not rolled back (--no-rollback)",
            undo=undo,
            undo_failed=f"the rollback of {name} failed too",
        )
        self.publish(serving)
        return cut

    def delete(self, name: str) -> None:
        """Delete a live variant's Deployment and Service (its pods get their grace period)."""
        deployment = live_name(self.stack, name)
        self.say(f"deleting {deployment}")
        self.kubectl.run(
            ["delete", f"deployment/{deployment}", f"service/{deployment}", "--ignore-not-found"],
            timeout=max(120.0, self.stack.stop_grace_period + 60.0),
        )

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

    # -- the change -----------------------------------------------------------------------
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
        plan = plan_kube_live(names, wanted, cluster)
        result = LiveResult(variant="+".join(names), outcome="unchanged", plan=plan.as_data())
        folders = write_live(self.stack, names)
        apply_secret(self.kubectl, self.stack)
        gateway = self._gateway_doc() if self.stack.gateway.enabled else None
        gateway = self._bootstrap(folders, gateway)
        serving = list(plan.keep)
        cut = 0
        with handled(interrupt_once):
            for name in plan.replace:
                cut += self.replace(name, folders[name], [*serving, name], result)
                serving.append(name)
            for name in plan.start:
                self.start(name, folders[name], result)
                serving.append(name)
                self.publish(serving)
            with interrupts_ignored():
                if plan.no_op:
                    self.publish(serving)  # a restarted gateway pod may route to an older set
                if plan.single:
                    if self.control is None:  # nothing started: the live set takes every new request
                        self.publish(serving)
                    cut += self.drain_single()
                    self.say(f"deleting deployment/{self.stack.service}: the live set serves")
                    self.kubectl.run(
                        ["delete", f"deployment/{self.stack.service}", "--ignore-not-found"],
                        timeout=max(120.0, self.stack.stop_grace_period + 60.0),
                    )
                for name in plan.stop:
                    self.publish(serving)  # without it: no new request reaches it
                    cut += self.drain(name)
                    self.delete(name)
                self._record(folders, gateway)
        result.drained = {"cut": cut, "continued": self.continued, "refused": self.refused}
        if cut:
            result.warnings.append(f"{cut} request(s) still running after the drain timeout were cut")
        if plan.no_op:
            result.notes.append(f"the live set {{{', '.join(names)}}} already runs on Kubernetes")
        else:
            result.outcome = f"live set {', '.join(names)}"
        result.timings["total"] = time.monotonic() - began
        return result


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
    deleting a new variant that failed) on failure."""
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
