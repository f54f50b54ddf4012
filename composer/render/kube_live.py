"""A live set on Kubernetes: `kubernetes/live/`, a kustomization of its own: the shared Service,
the gateway with `GATEWAY_LIVE_UPSTREAMS` (one upstream per variant: its Service), the base's
other extras, and per variant a Deployment (its replicas and GPU count) and a Service.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from composer import labels
from composer.render import kube_pod
from composer.render.files import RenderedFile
from composer.render.gateway import build_gateway_spec
from composer.render.kubernetes import (
    GENERATED,
    Manifest,
    _dns_label,
    _file,
    _header,
    _service,
    deployment,
    extra_base_manifests,
    gateway_deployment,
    kustomization_of,
    selector_labels,
    service,
)
from composer.render.live import with_upstreams
from composer.render.spec import CONTAINER_PORT, build_spec
from composer.render.target import Target
from composer.stack.model import Stack
from composer.stack.placement import live_members

LIVE_DIR = "live"


def live_name(stack: Stack, variant: str) -> str:
    """The Deployment and Service name of a live variant: `<service>-<variant>`."""
    return _dns_label(f"{stack.service}-{variant}", "stack.service and variant name")


def live_member_docs(stack: Stack, name: str) -> list[tuple[str, Manifest]]:
    """One live variant's Deployment (own selector, replicas, placement's GPUs) and Service."""
    variant = replace(stack.variant(name), standby="stop")
    spec = replace(build_spec(stack, variant), service=live_name(stack, name))
    doc = deployment(stack, Target(variant, spec, None))
    selector = {**selector_labels(stack), labels.VARIANT: name}
    doc["spec"]["selector"] = {"matchLabels": selector}
    doc["spec"]["replicas"] = variant.replicas
    # No GPU is free for a surge pod: replace one replica at a time.
    doc["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    gpus = len(variant.gpus[0]) if variant.gpus else stack.tensor_parallel_size
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = kube_pod.server_resources(
        stack, variant, gpus if spec.gpus is not None else None
    )
    return [
        (f"deployment-{name}.yaml", doc),
        (f"service-{name}.yaml", _service(stack, live_name(stack, name), selector, CONTAINER_PORT)),
    ]


def live_shared_docs(stack: Stack, variants: list[str]) -> list[tuple[str, Manifest]]:
    """The live set's stack-wide objects as (file name, manifest), its upstreams in the gateway."""
    docs: list[tuple[str, Manifest]] = [("service.yaml", service(stack))]
    gateway = build_gateway_spec(stack)
    for file, doc in extra_base_manifests(stack):
        if file == "gateway-deployment.yaml" and gateway is not None:
            urls = {
                name: f"http://{live_name(stack, name)}:{CONTAINER_PORT}" for name in variants
            }  # its Service
            upstreams = [{"name": f"{name}/1", "variant": name, "url": url} for name, url in urls.items()]
            doc = gateway_deployment(stack, with_upstreams(gateway, upstreams))
        docs.append((file, doc))
    return docs


def render_kube_live(stack: Stack, variants: list[str], out_dir: Path) -> list[RenderedFile]:
    """`kubernetes/live/`: the live set's kustomization and its manifests, in memory."""
    live_members(stack, variants)  # unknown names or overlapping GPU sets: refused first
    folder = out_dir / LIVE_DIR
    docs = live_shared_docs(stack, variants)
    for name in variants:
        docs += live_member_docs(stack, name)
    about = f"Live set: {', '.join(variants)}: every variant at once behind the gateway."
    kustomization = kustomization_of([file for file, _ in docs], stack.kubernetes.namespace)
    header = (
        f"{GENERATED}\n{about}\nApply it instead of an overlay:\n  kubectl apply -k kubernetes/{LIVE_DIR}"
    )
    return [
        _file(folder / "kustomization.yaml", kustomization, header),
        *(_file(folder / file, doc, f"{_header(doc)}\n{about}") for file, doc in docs),
    ]
