"""Kubernetes manifests rendered from the same ServiceSpec as the compose files.

`kubernetes/base/` holds the Service on the shared port, the gateway's Deployment and the
internal Service it forwards to, and the `[kubernetes]` table's budgets and monitors;
`overlays/<variant>/` adds the variant's Deployment, the same for every variant (one replica,
strategy Recreate: a pod holds its GPUs), so `kubectl apply -k kubernetes/overlays/mtp`
switches and `kubectl rollout undo` goes back. Dicts are dumped with PyYAML's safe dumper;
host values are rendered resolved; the API key is only ever a `secretKeyRef`.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import yaml

from composer import labels
from composer.errors import ConfigError, RenderError
from composer.render import kube_pod, kube_security
from composer.render.files import RenderedFile, one_line
from composer.render.gateway import GatewaySpec, build_gateway_spec
from composer.render.spec import API_KEY_VAR, CONTAINER_PORT, ServiceSpec, resolve
from composer.render.target import Target, resolve_target
from composer.stack.kubernetes import DNS_LABEL, LABEL_VALUE
from composer.stack.model import Stack

Manifest = dict[str, Any]
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
MANAGED_BY = "compose-spec"
SERVER_COMPONENT = "server"
GATEWAY_COMPONENT = "gateway"
PROGRESS_MARGIN = 120  # seconds on top of the cold-start budget before a rollout counts as stuck
SHM_VOLUME = "dshm"
GATEWAY_UID = 10001  # the gateway image's user and group (images/gateway/Dockerfile)
GATEWAY_GRACE_MARGIN = 30  # seconds the gateway's termination grace period adds to the drain timeout
PRE_STOP_SLEEP = 5  # seconds a stopping gateway keeps serving while the Service drops its endpoint
LIVENESS_TIMEOUT = 10
CONTROL_SOCKET_DIR = "/run/gateway"  # the control socket's folder: an emptyDir (read-only root)


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
    if not DNS_LABEL.fullmatch(value):
        raise RenderError(
            f"{key} = {value!r} is not a valid Kubernetes name: use lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (at most 63)"
        )
    return value


def _label_value(value: str, what: str) -> str:
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
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


def _probe(period: int, timeout: int, failures: int, path: str = "/health") -> Manifest:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def _env(stack: Stack, secret_env: tuple[str, ...], values: list[tuple[str, str]]) -> list[Manifest]:
    ref = {"name": secret_name(stack), "key": API_KEY_VAR}
    return [{"name": name, "valueFrom": {"secretKeyRef": ref}} for name in secret_env] + [
        {"name": name, "value": value} for name, value in values
    ]


def _volumes(stack: Stack, spec: ServiceSpec) -> tuple[list[Manifest], list[Manifest]]:
    """The pod's volumes and the container's mounts: models read-only, /dev/shm in memory."""
    claims = (stack.kubernetes.model_claim, stack.kubernetes.draft_claim)
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    for name, claim, mount in zip(("models", "draft"), claims, spec.mounts, strict=False):  # draft: optional
        if stack.kubernetes.models == "pvc":
            source: Manifest = {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        else:
            source = {"hostPath": {"path": resolve(mount.source), "type": "Directory"}}
        volumes.append({"name": name, **source})
        mounts.append({"name": name, "mountPath": mount.target, "readOnly": mount.read_only})
    shm = {"medium": "Memory", "sizeLimit": kube_pod.gib(stack.kubernetes.shm_size)}
    volumes.append({"name": SHM_VOLUME, "emptyDir": shm})
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
    volumes, mounts = _volumes(stack, spec)
    health = spec.healthcheck
    cold_start = max(1, math.ceil(health.start_period / health.interval))
    container: Manifest = {
        "name": spec.service,
        "image": _pinned_image(resolve(spec.image), spec.variant),
        "imagePullPolicy": stack.kubernetes.image_pull_policy,
        "args": [resolve(arg) for arg in spec.command],
        "env": _env(stack, spec.secret_env, list(spec.environment)),
        "ports": [{"name": "http", "containerPort": spec.container_port, "protocol": "TCP"}],
        "resources": kube_pod.server_resources(
            stack, target.variant, stack.tensor_parallel_size if spec.gpus is not None else None
        ),
        "volumeMounts": mounts,
        # The cold-start budget: start_period of probing before readiness (and liveness) take over.
        "startupProbe": _probe(health.interval, health.timeout, cold_start),
        "readinessProbe": _probe(health.interval, health.timeout, health.retries),
        **_liveness(stack, spec),
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    pod_annotations = {**annotations, **kube_pod.scrape_annotations(stack, spec.container_port, "/metrics")}
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
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": {
                    **kube_pod.pod_fields(stack, gpus=spec.gpus is not None),
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "terminationGracePeriodSeconds": spec.stop_grace_period,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def _liveness(stack: Stack, spec: ServiceSpec) -> Manifest:
    """A liveness probe only when asked for, and never shorter than the load (start_period)."""
    budget = stack.kubernetes.liveness
    if not budget:
        return {}
    if budget < stack.start_period:
        raise ConfigError(
            f"invalid kubernetes.liveness = {budget}s: shorter than stack.start_period "
            f"({stack.start_period}s), it would restart a server that is still loading; "
            "use off or at least the start period"
        )
    interval = spec.healthcheck.interval
    failures = max(1, math.ceil(budget / interval))
    return {"livenessProbe": _probe(interval, max(LIVENESS_TIMEOUT, spec.healthcheck.timeout), failures)}


def service(stack: Stack) -> Manifest:
    """The Service on the shared port: the gateway's when there is one, else the variant's."""
    component = GATEWAY_COMPONENT if stack.gateway.enabled else SERVER_COMPONENT
    return _service(stack, stack.service, selector_labels(stack, component), stack.port)


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
    """The gateway's Deployment (its control socket stays inside the pod)."""
    selector = selector_labels(stack, GATEWAY_COMPONENT)
    upstream = f"http://{variant_service_name(stack)}:{CONTAINER_PORT}"
    values = [
        (name, upstream if name == "GATEWAY_UPSTREAM" else resolve(value))
        for name, value in gateway.environment
        # sleep standby is a compose feature; so is the state volume (a pod's history is its own)
        if name not in ("GATEWAY_UPSTREAM_CANDIDATES", "GATEWAY_STATE_DIR")
    ]
    health = gateway.healthcheck
    probe = _probe(health.interval, health.timeout, health.retries, "/gateway/health")
    container: Manifest = {
        "name": gateway.service,
        "image": _pinned_image(resolve(gateway.image), gateway.service),
        "imagePullPolicy": stack.kubernetes.image_pull_policy,
        "env": _env(stack, gateway.secret_env, values),
        "ports": [{"name": "http", "containerPort": gateway.container_port, "protocol": "TCP"}],
        "resources": kube_pod.gateway_resources(stack),
        "readinessProbe": probe,
        "livenessProbe": probe,
        # Keep serving while the Service drops this pod's endpoint, then stop.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP}}},
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "control", "mountPath": CONTROL_SOCKET_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    annotations = kube_pod.scrape_annotations(stack, gateway.container_port, kube_pod.GATEWAY_METRICS)
    pod_spec = {
        **kube_pod.pod_fields(stack, gpus=False),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": GATEWAY_UID,
            "runAsGroup": GATEWAY_UID,
            "fsGroup": GATEWAY_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationGracePeriodSeconds": gateway_grace(stack),
        "containers": [container],
        "volumes": [
            {"name": "control", "emptyDir": {"sizeLimit": "1Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    # The hash tells `up --target kubernetes` whether the gateway itself changes (it is
    # then rolled first, on its own, so the switch's hold is on the pod that stays).
    digest = hashlib.sha256(json.dumps([pod_spec, annotations], sort_keys=True).encode()).hexdigest()[:16]
    pod_labels = {**selector, labels.K8S_MANAGED_BY: MANAGED_BY}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": gateway_name(stack),
            "labels": pod_labels,
        },
        "spec": {
            "replicas": 1,
            # The new pod is ready before the old one stops: no gap on the shared port.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": {**pod_labels, labels.CONFIG_HASH: digest},
                    **({"annotations": annotations} if annotations else {}),
                },
                "spec": pod_spec,
            },
        },
    }


def gateway_name(stack: Stack) -> str:
    """The gateway's Deployment (and the target of `kubectl exec` for its control channel)."""
    return _dns_label(f"{stack.service}-gateway", "stack.service")


def gateway_grace(stack: Stack) -> int:
    """The gateway's termination grace period: longer than the drain timeout."""
    drain = stack.gateway.drain_timeout
    grace = stack.kubernetes.gateway_grace or drain + PRE_STOP_SLEEP + GATEWAY_GRACE_MARGIN
    if grace <= drain:
        raise ConfigError(
            f"invalid kubernetes.gateway_grace = {grace}s: not longer than gateway.drain_timeout "
            f"({drain}s); a drain would be cut by the kubelet: use more than {drain}s"
        )
    return grace


def extra_base_manifests(stack: Stack) -> list[tuple[str, Manifest]]:
    """The base's other objects as (file name, manifest): gateway, budgets, monitors."""
    kube_pod.check_owners(stack)
    gateway = build_gateway_spec(stack)
    managed = {labels.K8S_MANAGED_BY: MANAGED_BY}
    found: list[tuple[str, Manifest]] = []
    if gateway is not None:
        found += [
            ("gateway-deployment.yaml", gateway_deployment(stack, gateway)),
            # the internal Service the gateway forwards to (the serving variant)
            (
                "variant-service.yaml",
                _service(stack, variant_service_name(stack), selector_labels(stack), CONTAINER_PORT),
            ),
        ]
    for which in {"gateway": ["gateway"], "all": ["gateway", "server"], "none": []}[stack.kubernetes.pdb]:
        if which == SERVER_COMPONENT or gateway is not None:
            name = gateway_name(stack) if which == GATEWAY_COMPONENT else stack.service
            budget = kube_pod.disruption_budget(name, selector_labels(stack, which), managed)
            found.append((f"pdb-{which}.yaml", budget))
    if stack.kubernetes.service_monitor:
        monitored = [(SERVER_COMPONENT, stack.service, kube_pod.SERVER_METRICS)]
        if gateway is not None:
            monitored = [
                (GATEWAY_COMPONENT, stack.service, kube_pod.GATEWAY_METRICS),
                (SERVER_COMPONENT, variant_service_name(stack), kube_pod.SERVER_METRICS),
            ]
        for component, name, path in monitored:
            service_labels = {**selector_labels(stack, component), **managed}
            monitor = kube_pod.service_monitor(stack, name, service_labels, path)
            found.append((f"servicemonitor-{component}.yaml", monitor))
    return found


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


def _file(path: Path, doc: Manifest, header: str) -> RenderedFile:
    return RenderedFile(path, dump(doc, header), 0o644)


def kustomization_of(resources: list[str], namespace: str = "") -> Manifest:
    doc: Manifest = {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization"}
    if namespace:
        doc["namespace"] = namespace
    doc["resources"] = resources
    return doc


def _header(doc: Manifest) -> str:
    """The generated-file header; a Deployment's says which Pod Security level it meets."""
    if doc.get("kind") != "Deployment":
        return GENERATED
    level = kube_security.pod_security_level(doc)
    line = f"Pod Security: meets {level!r}."
    if level != "restricted":
        hostpath = any("hostPath" in v for v in doc["spec"]["template"]["spec"].get("volumes", []))
        line += (
            " The hostPath model volume is outside 'baseline': set kubernetes.models = \"pvc\" to meet it."
            if hostpath
            else " vLLM runs as root in its image, so 'restricted' is out of reach."
        )
    return f"{GENERATED}\n{line}"


GENERATED = "Generated by `compose-spec render --target kubernetes` from composer.toml: do not edit by hand."


def render_kubernetes(stack: Stack, variants: list[str], out_dir: Path) -> list[RenderedFile]:
    """The base and one overlay per requested variant (all when empty), in memory."""
    names = variants or list(stack.variants)
    base = out_dir / "base"
    extras = extra_base_manifests(stack)
    kustomization = kustomization_of(["service.yaml", *(name for name, _ in extras)])
    files = [
        _file(
            base / "kustomization.yaml",
            kustomization,
            f"{GENERATED}\nShared by every variant; apply an overlay, never the base alone:\n"
            "  kubectl apply -k kubernetes/overlays/VARIANT",
        ),
        _file(
            base / "service.yaml",
            service(stack),
            f"{GENERATED}\nThe shared port, on whichever variant serves.",
        ),
        *(_file(base / name, doc, _header(doc)) for name, doc in extras),
    ]
    for name in names:
        target = resolve_target(stack, name)
        overlay = out_dir / "overlays" / name
        about = f"Variant {name}: {target.variant.description}" if target.variant.description else name
        kustomization = kustomization_of(["../../base", "deployment.yaml"], stack.kubernetes.namespace)
        doc = deployment(stack, target)
        files += [
            _file(
                overlay / "kustomization.yaml",
                kustomization,
                f"{GENERATED}\n{about}\nSwitch the serving variant to {name} (a Recreate rollout; undo goes "
                f"back):\n  kubectl apply -k kubernetes/overlays/{name}",
            ),
            _file(
                overlay / "deployment.yaml",
                doc,
                f"{_header(doc)}\n{about}\nThe API key comes from the Secret {secret_name(stack)} "
                f"(key {API_KEY_VAR}), which is never rendered.",
            ),
        ]
    return files
