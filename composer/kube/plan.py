"""What the cluster runs, what it should run, and the typed operations between (pure plans).

`read_cluster` reads the project's server Deployments (one `kubectl get deployments
--selector`: each live one carries its configuration's identity, an annotation `up` stamps,
and the one-variant Deployment its variant); `write_live` writes a live set's
kustomizations under the state folder. Two plans, both tuples of the typed operations of
`composer.swap.ops`, run by `composer.kube.execute`:

- `plan_kube_live`: a live set's change, the Docker live set's operations on members named
  `VARIANT/1` (a changed Deployment applied in place: Reapply, undone by RollBack);
- `plan_kube_single`: the one-variant Deployment switched to another variant: UpdateGateway
  when the gateway itself changes, HoldGateway (drain), Roll (apply -k and rollout status,
  undone by RollBack and the gate of the variant before), GateMember (through the shared
  Service, past the hold), ReleaseGateway.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from composer import labels
from composer.errors import KubectlFailed
from composer.kube.kubectl import Kubectl
from composer.kube.rollout import Serving
from composer.render.files import RenderedFile, write_atomic
from composer.render.kube_live import live_member_docs, live_name, live_shared_docs
from composer.render.kubernetes import GENERATED, Manifest, _kustomization, dump, selector_labels
from composer.render.live import LIVE_UPSTREAMS_VAR
from composer.render.runfiles import state_dir
from composer.stack.model import Stack
from composer.swap import ops
from composer.swap.live import LivePlan, _operations

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
) -> tuple[ops.Op, ...]:
    """The switch of the one-variant Deployment to `variant` (pure) with the configuration
    `config_hash`: `before` is what it runs now (None: no Deployment yet), `hold` whether the
    gateway holds and drains around it, `gateway_file` the gateway Deployment to roll first
    when the gateway itself changes. The variant before is what an undo gates again."""
    deployment = stack.service
    member = ops.Member(variant, variant, deployment, deployment, str(overlay))
    previous = None
    if before is not None and before.config_hash != config_hash:
        name = before.variant or deployment
        previous = ops.Member(name, name, deployment, deployment, "")
    planned: list[ops.Op] = [ops.UpdateGateway(gateway_file)] if hold and gateway_file else []
    planned += [ops.HoldGateway(continue_streams)] if hold else []
    planned += [ops.Roll(member, previous), ops.GateMember(member)]
    return (*planned, *([ops.ReleaseGateway()] if hold else []))


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
