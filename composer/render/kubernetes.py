"""Kubernetes manifests rendered from the same ServiceSpec as the compose files.

The tree (`kubernetes/` next to the stack file by default):

    base/kustomization.yaml          the Service on the shared port (+ extra_base_manifests)
    base/service.yaml
    base/gateway-deployment.yaml     with a gateway: its Deployment, in front of the variant
    base/variant-service.yaml        with a gateway: the internal Service it forwards to
    overlays/<variant>/kustomization.yaml   base + this variant's Deployment
    overlays/<variant>/deployment.yaml

Every variant is the same Deployment (named after the stack's service, one replica,
strategy Recreate: a pod holds its GPUs, so the old pod must go before the new one can
be scheduled), so `kubectl apply -k kubernetes/overlays/mtp` switches whichever variant
runs, and `kubectl rollout undo` goes back. The Service selects the serving pods by the
shared app labels, never by variant.

Manifests are built as dicts and dumped with PyYAML's safe dumper, which quotes every
string that would read as another type, so no value can change the document's shape.
Kubernetes has no `${VAR:-default}`: host values are rendered at their resolved value
(the composer.toml defaults for the committed tree; `--set` or a kustomize patch
overrides them). The API key is only ever a `secretKeyRef`; the Secret itself is never
rendered.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from composer import labels
from composer.errors import RenderError
from composer.render.files import RenderedFile, one_line
from composer.render.gateway import GatewaySpec, build_gateway_spec
from composer.render.spec import API_KEY_VAR, CONTAINER_PORT, ServiceSpec, resolve
from composer.render.target import Target, resolve_target
from composer.stack.model import Stack

Manifest = dict[str, Any]
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
MANAGED_BY = "compose-spec"
SERVER_COMPONENT = "server"
GATEWAY_COMPONENT = "gateway"
PROGRESS_MARGIN = 120
"""Seconds on top of the cold-start budget before a rollout counts as stuck."""
SHM_VOLUME = "dshm"
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def kube_dir(stack: Stack) -> Path:
    """Where `render --target kubernetes` writes by default: `kubernetes/` next to the stack file."""
    return stack.render_dir.parent / "kubernetes"


def secret_name(stack: Stack) -> str:
    """The Secret holding VLLM_API_KEY (created by `up --target kubernetes` or by hand)."""
    return f"{_dns_label(stack.project, 'stack.project')}-api-key"


def selector_labels(stack: Stack, component: str = SERVER_COMPONENT) -> dict[str, str]:
    """The labels every pod of a component carries whatever the variant: the selectors."""
    return {
        labels.K8S_NAME: _dns_label(stack.service, "stack.service"),
        labels.K8S_INSTANCE: _dns_label(stack.project, "stack.project"),
        labels.K8S_COMPONENT: component,
    }


def _dns_label(value: str, key: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise RenderError(
            f"{key} = {value!r} is not a valid Kubernetes name: use lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (at most 63)"
        )
    return value


def _label_value(value: str, what: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise RenderError(
            f"{what} {value!r} is not a valid Kubernetes label value: use at most 63 letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    return value


def _pinned_image(image: str, variant: str) -> str:
    """The image, refused when it has no tag or the tag `latest` (a rollout needs a fixed one)."""
    if "@" in image:
        return image
    name = image.rsplit("/", 1)[-1]
    tag = name.partition(":")[2]
    if not tag or tag == "latest":
        raise RenderError(
            f"variant {variant}: image {image!r} has {'the tag latest' if tag else 'no tag'}; "
            "Kubernetes rollouts need a fixed tag or a digest (set it in [images] or with --set)"
        )
    return image


def _probe(spec: ServiceSpec, period: int, failures: int) -> Manifest:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": spec.healthcheck.timeout,
        "failureThreshold": failures,
    }


def _volumes(stack: Stack, spec: ServiceSpec) -> tuple[list[Manifest], list[Manifest]]:
    """The pod's volumes and the container's mounts: models read-only, /dev/shm in memory."""
    claims = [stack.kubernetes.model_claim, stack.kubernetes.draft_claim]
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    for index, mount in enumerate(spec.mounts):
        name = "models" if index == 0 else "draft" if index == 1 else f"models-{index}"
        if stack.kubernetes.models == "pvc":
            claim = claims[index] if index < len(claims) else f"{claims[0]}-{index}"
            source: Manifest = {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        else:
            source = {"hostPath": {"path": resolve(mount.source), "type": "Directory"}}
        volumes.append({"name": name, **source})
        mounts.append({"name": name, "mountPath": mount.target, "readOnly": mount.read_only})
    volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}})
    mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return volumes, mounts


def deployment(stack: Stack, target: Target) -> Manifest:
    """The variant's Deployment: the compose service's container, as a Recreate rollout."""
    spec = target.spec
    selector = selector_labels(stack)
    pod_labels = {
        **selector,
        labels.K8S_MANAGED_BY: MANAGED_BY,
        labels.VARIANT: _label_value(spec.variant, "variant name"),
        labels.CONFIG_HASH: spec.hash,
    }
    annotations = {
        labels.SERVED_NAME: dict(spec.labels)[labels.SERVED_NAME],
        labels.PORT: dict(spec.labels)[labels.PORT],
    }
    env: list[Manifest] = [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name(stack), "key": API_KEY_VAR}}}
        for name in spec.secret_env
    ]
    env += [{"name": name, "value": value} for name, value in spec.environment]
    volumes, mounts = _volumes(stack, spec)
    container: Manifest = {
        "name": spec.service,
        "image": _pinned_image(resolve(spec.image), spec.variant),
        "imagePullPolicy": "IfNotPresent",
        "args": [resolve(arg) for arg in spec.command],
        "env": env,
        "ports": [{"name": "http", "containerPort": spec.container_port, "protocol": "TCP"}],
    }
    if spec.gpus is not None:
        # One GPU per tensor-parallel rank; the device plugin picks which (GPU_DEVICES is not used).
        container["resources"] = {"limits": {"nvidia.com/gpu": stack.tensor_parallel_size}}
    health = spec.healthcheck
    cold_start = max(1, math.ceil(health.start_period / health.interval))
    container |= {
        "volumeMounts": mounts,
        # The cold-start budget: start_period of probing before liveness takes over.
        "startupProbe": _probe(spec, health.interval, cold_start),
        "readinessProbe": _probe(spec, health.interval, health.retries),
        "livenessProbe": _probe(spec, health.interval, health.retries),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": spec.service, "labels": pod_labels, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "progressDeadlineSeconds": health.start_period + PROGRESS_MARGIN,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations},
                "spec": {
                    "terminationGracePeriodSeconds": spec.stop_grace_period,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def service(stack: Stack) -> Manifest:
    """The Service on the shared port (ClusterIP): the gateway when the stack has one,
    else whichever variant serves."""
    component = GATEWAY_COMPONENT if stack.gateway.enabled else SERVER_COMPONENT
    return _service(stack, stack.service, selector_labels(stack, component), stack.port)


def variant_service(stack: Stack) -> Manifest:
    """Behind the gateway: the internal Service the gateway forwards to (the serving variant)."""
    return _service(stack, variant_service_name(stack), selector_labels(stack), CONTAINER_PORT)


def variant_service_name(stack: Stack) -> str:
    return _dns_label(f"{stack.service}-variant", "stack.service")


def _service(stack: Stack, name: str, selector: dict[str, str], port: int) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {**selector, labels.K8S_MANAGED_BY: MANAGED_BY}},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def gateway_deployment(stack: Stack, gateway: GatewaySpec) -> Manifest:
    """The gateway's Deployment: one replica in front of whichever variant serves. Its
    control channel is a UNIX socket inside the pod: no port of it is exposed."""
    selector = selector_labels(stack, GATEWAY_COMPONENT)
    upstream = f"http://{variant_service_name(stack)}:{CONTAINER_PORT}"
    env: list[Manifest] = [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name(stack), "key": API_KEY_VAR}}}
        for name in gateway.secret_env
    ]
    env += [
        {"name": name, "value": upstream if name == "GATEWAY_UPSTREAM" else resolve(value)}
        for name, value in gateway.environment
        if name != "GATEWAY_UPSTREAM_CANDIDATES"  # sleep standby is a compose feature
    ]
    probe = {
        "httpGet": {"path": "/gateway/health", "port": "http"},
        "periodSeconds": gateway.healthcheck.interval,
        "timeoutSeconds": gateway.healthcheck.timeout,
        "failureThreshold": gateway.healthcheck.retries,
    }
    container: Manifest = {
        "name": gateway.service,
        "image": _pinned_image(resolve(gateway.image), gateway.service),
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "ports": [{"name": "http", "containerPort": gateway.container_port, "protocol": "TCP"}],
        "readinessProbe": probe,
        "livenessProbe": probe,
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": _dns_label(f"{stack.service}-{gateway.service}", "stack.service"),
            "labels": {**selector, labels.K8S_MANAGED_BY: MANAGED_BY},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**selector, labels.K8S_MANAGED_BY: MANAGED_BY}},
                "spec": {
                    "terminationGracePeriodSeconds": gateway.stop_grace_period,
                    "containers": [container],
                },
            },
        },
    }


def extra_base_manifests(stack: Stack) -> list[tuple[str, Manifest]]:
    """Stack-wide objects of the base besides the shared Service, as (file name, manifest):
    the gateway's Deployment and the internal Service it forwards to, when enabled.

    Each file lands in `base/` and is listed in its kustomization."""
    gateway = build_gateway_spec(stack)
    if gateway is None:
        return []
    return [
        ("gateway-deployment.yaml", gateway_deployment(stack, gateway)),
        ("variant-service.yaml", variant_service(stack)),
    ]


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper without anchors and aliases (shared dicts are written out)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(manifest: Manifest, header: str) -> str:
    """A manifest as YAML under a `#` comment header; strings quoted wherever needed."""
    body = yaml.dump(
        manifest, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=False, width=4096
    )
    return "".join(f"# {one_line(line)}\n" if line else "#\n" for line in header.splitlines()) + body


def _kustomization(resources: list[str], namespace: str = "") -> Manifest:
    doc: Manifest = {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization"}
    if namespace:
        doc["namespace"] = namespace
    doc["resources"] = resources
    return doc


GENERATED = "Generated by `compose-spec render --target kubernetes` from composer.toml: do not edit by hand."


def render_kubernetes(stack: Stack, variants: list[str], out_dir: Path) -> list[RenderedFile]:
    """The base and one overlay per requested variant (all when empty), in memory."""
    names = variants or list(stack.variants)
    base = out_dir / "base"
    extras = extra_base_manifests(stack)
    files = [
        RenderedFile(
            base / "kustomization.yaml",
            dump(
                _kustomization(["service.yaml", *(name for name, _ in extras)]),
                f"{GENERATED}\nShared by every variant; apply an overlay, never the base alone:\n"
                "  kubectl apply -k kubernetes/overlays/VARIANT",
            ),
            0o644,
        ),
        RenderedFile(
            base / "service.yaml",
            dump(service(stack), f"{GENERATED}\nThe shared port, on whichever variant serves."),
            0o644,
        ),
        *(RenderedFile(base / name, dump(doc, GENERATED), 0o644) for name, doc in extras),
    ]
    for name in names:
        target = resolve_target(stack, name)
        overlay = out_dir / "overlays" / name
        about = f"Variant {name}: {target.variant.description}" if target.variant.description else name
        files.append(
            RenderedFile(
                overlay / "kustomization.yaml",
                dump(
                    _kustomization(["../../base", "deployment.yaml"], stack.kubernetes.namespace),
                    f"{GENERATED}\n{about}\n"
                    f"Switch the serving variant to {name} (a Recreate rollout; undo goes back):\n"
                    f"  kubectl apply -k kubernetes/overlays/{name}",
                ),
                0o644,
            )
        )
        files.append(
            RenderedFile(
                overlay / "deployment.yaml",
                dump(
                    deployment(stack, target),
                    f"{GENERATED}\n{about}\nThe API key comes from the Secret {secret_name(stack)} "
                    f"(key {API_KEY_VAR}), which is never rendered.",
                ),
                0o644,
            )
        )
    return files
