"""The `[kubernetes]` table of a stack: how the rendered manifests reach the cluster.

Only what Kubernetes needs beyond the compose settings: where the models come from (a
hostPath on the node, or PersistentVolumeClaims), scheduling on a GPU node pool
(resources, shm size, node selector, tolerations, runtime and priority class), image
pulls, the disruption budget, liveness, monitoring (ServiceMonitor, scrape annotations),
the namespace and kube context `up --target kubernetes` works in, how the readiness gate
reaches the Service, and which `kubectl` to run. Structured values are parsed in
`kube_values`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from composer.stack import kube_values as kv
from composer.stack.values import parse_bool, parse_duration, parse_size, parse_text

MODEL_SOURCES = ("hostPath", "pvc")


@dataclass(frozen=True)
class KubeSettings:
    """Kubernetes-only settings; the defaults render the committed `kubernetes/` tree."""

    models: str = "hostPath"
    model_claim: str = "vllm-models"
    draft_claim: str = "vllm-drafts"
    namespace: str = ""
    service_url: str = ""
    kubectl: str = "kubectl"
    context: str = ""  # kubectl --context ('' = kubeconfig's current context)
    kubeconfig: str = ""  # KUBECONFIG for kubectl ('' = kubectl's own default)
    resources: dict[str, kv.Resources] = field(default_factory=dict)
    shm_size: int = 8 * 2**30  # the /dev/shm emptyDir's sizeLimit
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, object]] = field(default_factory=lambda: list(DEFAULT_TOLERATIONS))
    runtime_class: str = ""
    priority_class: str = ""
    service_account: str = ""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    pdb: str = "gateway"
    liveness: int = 0  # seconds of failed /health before vLLM is restarted (0 = no liveness probe)
    gateway_grace: int = 0  # the gateway's terminationGracePeriodSeconds (0 = drain_timeout + 30)
    service_monitor: bool = False
    monitor_labels: dict[str, str] = field(default_factory=dict)
    scrape_interval: int = 30
    scrape_annotations: bool = False


DEFAULT_TOLERATIONS: tuple[dict[str, object], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)
"""GPU node pools are commonly tainted so; the toleration is harmless where they are not."""


def parse_models(raw: object) -> str:
    """`hostPath` or `pvc` (case-insensitive)."""
    text = str(raw).strip()
    for source in MODEL_SOURCES:
        if text.lower() == source.lower():
            return source
    raise ValueError("hostPath (the node's MODEL_DIR and DRAFT_DIR) or pvc (model_claim and draft_claim)")


def parse_dns_label(raw: object) -> str:
    """A Kubernetes object name: lowercase letters, digits and '-', at most 63 characters."""
    text = str(raw)
    if not kv.DNS_LABEL.fullmatch(text):
        raise ValueError("lowercase letters, digits and '-', starting and ending with a letter or digit")
    return text


def parse_namespace(raw: object) -> str:
    """A namespace, or empty for kubectl's current one."""
    return "" if str(raw) == "" else parse_dns_label(raw)


def parse_url(raw: object) -> str:
    """An http(s) URL without a trailing slash, or empty to use `kubectl port-forward`."""
    text = str(raw).strip().rstrip("/")
    if text and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise ValueError("an http:// or https:// URL, or empty to use kubectl port-forward")
    return text


def parse_context(raw: object) -> str:
    """Any text without NUL bytes or newlines, or empty for kubectl's default."""
    text = str(raw).strip()
    if "\x00" in text or "\n" in text:
        raise ValueError("a name or path without NUL bytes or newlines, or empty")
    return text


KUBE_SETTINGS: tuple[tuple[str, str | None, Callable[[object], object], object], ...] = (
    # key, environment variable, parser, default
    ("models", None, parse_models, KubeSettings.models),
    ("model_claim", None, parse_dns_label, KubeSettings.model_claim),
    ("draft_claim", None, parse_dns_label, KubeSettings.draft_claim),
    ("namespace", "KUBE_NAMESPACE", parse_namespace, KubeSettings.namespace),
    ("service_url", "KUBE_SERVICE_URL", parse_url, KubeSettings.service_url),
    ("kubectl", "KUBECTL", parse_text, KubeSettings.kubectl),
    ("context", "KUBE_CONTEXT", parse_context, ""),
    ("kubeconfig", "KUBECONFIG", parse_context, ""),
    ("resources", None, kv.parse_resources, {}),
    ("shm_size", None, parse_size, KubeSettings.shm_size),
    ("node_selector", None, kv.parse_labels, {}),
    ("tolerations", None, kv.parse_tolerations, list(DEFAULT_TOLERATIONS)),
    ("runtime_class", None, kv.parse_object_name, ""),
    ("priority_class", None, kv.parse_object_name, ""),
    ("service_account", None, kv.parse_object_name, ""),
    ("image_pull_policy", None, kv.parse_pull_policy, KubeSettings.image_pull_policy),
    ("image_pull_secrets", None, kv.parse_names, ()),
    ("pdb", None, kv.parse_pdb, KubeSettings.pdb),
    ("liveness", None, kv.parse_optional_duration, 0),
    ("gateway_grace", None, kv.parse_optional_duration, 0),
    ("service_monitor", None, parse_bool, False),
    ("monitor_labels", None, kv.parse_labels, {}),
    ("scrape_interval", None, parse_duration, KubeSettings.scrape_interval),
    ("scrape_annotations", None, parse_bool, False),
)
