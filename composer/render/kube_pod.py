"""What the `[kubernetes]` table adds to the manifests: resources, scheduling, image pulls,
disruption budgets, ServiceMonitors and scrape annotations.

The vLLM pod requests the host memory its ranks need while loading (weights, runtime, its
/dev/shm), so it is never BestEffort, and gets no memory limit by default (a loader that
crosses one is killed); the gateway gets small requests and a limit. `kubernetes.resources`
overrides any figure for the gateway, every variant (`server`) or one variant.
"""

from __future__ import annotations

import math
from typing import Any

from composer.errors import ConfigError
from composer.stack.kubernetes import Resources, quantity_value
from composer.stack.model import Stack, Variant

GIB = 2**30
RUNTIME_PER_RANK = 4 * GIB  # host memory per rank besides the weights: CUDA context, Python, torch
CPU_PER_RANK = 2
SERVER_EPHEMERAL = "10Gi"
GATEWAY_DEFAULTS: Resources = {
    "requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "64Mi"},
    "limits": {"memory": "512Mi", "ephemeral-storage": "256Mi"},
}
OWNERS = ("gateway", "server")
Manifest = dict[str, Any]
MONITOR_API = "monitoring.coreos.com/v1"
SERVER_METRICS = "/metrics"
GATEWAY_METRICS = "/gateway/metrics"


def gib(size: int) -> str:
    return f"{math.ceil(size / GIB)}Gi"


def check_owners(stack: Stack) -> None:
    """Every key of kubernetes.resources names the gateway, `server` or a variant."""
    for owner in stack.kubernetes.resources:
        if owner not in OWNERS and owner not in stack.variants:
            allowed = ", ".join([*OWNERS, *sorted(stack.variants)])
            raise ConfigError(f"invalid kubernetes.resources.{owner}: not a variant: use one of {allowed}")


def _merge(key: str, *layers: Resources) -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for layer in layers:
        for kind, values in layer.items():
            merged.setdefault(kind, {}).update(values)
    for name, amount in merged.get("requests", {}).items():
        limit = merged.get("limits", {}).get(name)
        if limit is not None and quantity_value(amount) > quantity_value(limit):
            raise ConfigError(
                f"invalid kubernetes.resources.{key}.limits.{name} = {limit!r}: below the request "
                f"{amount!r} (set requests.{name} too, at most the limit)"
            )
    return {kind: values for kind, values in merged.items() if values}


def server_resources(stack: Stack, variant: Variant, gpus: int | None) -> dict[str, Any]:
    """The vLLM container's resources: defaults (from the weights per GPU, the ranks and the shm
    size), then `server`, then the variant's own."""
    table = stack.kubernetes.resources
    ranks = stack.tensor_parallel_size if stack.gpus is not None else 1
    memory = ((variant.weights_bytes or 0) + RUNTIME_PER_RANK) * ranks + stack.kubernetes.shm_size
    requests = {
        "cpu": str(CPU_PER_RANK * ranks),
        "memory": gib(memory),
        "ephemeral-storage": SERVER_EPHEMERAL,
    }
    merged: dict[str, Any] = _merge(
        variant.name if variant.name in table else "server",
        {"requests": requests},
        table.get("server", {}),
        table.get(variant.name, {}),
    )
    if gpus is not None:
        # One GPU per tensor-parallel rank; the device plugin picks which (GPU_DEVICES is not used).
        merged.setdefault("limits", {})["nvidia.com/gpu"] = gpus
    return merged


def gateway_resources(stack: Stack) -> dict[str, Any]:
    return _merge("gateway", GATEWAY_DEFAULTS, stack.kubernetes.resources.get("gateway", {}))


def pod_fields(stack: Stack, gpus: bool) -> dict[str, Any]:
    """Fields every pod of the stack gets (service account, priority, pull secrets), and on the GPU
    node pool (`gpus`) its scheduling: node selector, tolerations, runtime class."""
    kube = stack.kubernetes
    fields = {
        "serviceAccountName": kube.service_account,
        "priorityClassName": kube.priority_class,
        "imagePullSecrets": [{"name": name} for name in kube.image_pull_secrets],
    }
    if gpus:
        fields |= {
            "nodeSelector": dict(kube.node_selector),
            "tolerations": [dict(t) for t in kube.tolerations],
            "runtimeClassName": kube.runtime_class,
        }
    return {"automountServiceAccountToken": False, **{key: value for key, value in fields.items() if value}}


def scrape_annotations(stack: Stack, port: int, path: str) -> dict[str, str]:
    """`prometheus.io/*` annotations of a pod template (none unless asked for)."""
    if not stack.kubernetes.scrape_annotations:
        return {}
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": path}


def disruption_budget(name: str, selector: dict[str, str], managed: dict[str, str]) -> Manifest:
    """A PodDisruptionBudget that lets no voluntary eviction take the pod."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "labels": {**selector, **managed}},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": selector}},
    }


def service_monitor(stack: Stack, name: str, service_labels: dict[str, str], path: str) -> Manifest:
    """A ServiceMonitor scraping the Service with these labels on its `http` port."""
    return {
        "apiVersion": MONITOR_API,
        "kind": "ServiceMonitor",
        "metadata": {
            "name": name,
            "labels": {**service_labels, **stack.kubernetes.monitor_labels},
        },
        "spec": {
            "selector": {"matchLabels": service_labels},
            "endpoints": [
                {
                    "port": "http",
                    "path": path,
                    "interval": f"{stack.kubernetes.scrape_interval}s",
                    "scheme": "http",
                }
            ],
        },
    }
