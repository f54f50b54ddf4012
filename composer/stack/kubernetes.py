"""The `[kubernetes]` table of a stack: how the rendered manifests reach the cluster.

Only what Kubernetes needs beyond the compose settings: where the models come from (a
hostPath on the node, or PersistentVolumeClaims), the namespace `up --target kubernetes`
works in, how the readiness gate reaches the Service, and which `kubectl` to run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from composer.stack.values import parse_text

MODEL_SOURCES = ("hostPath", "pvc")
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class KubeSettings:
    """Kubernetes-only settings; the defaults render the committed `kubernetes/` tree."""

    models: str = "hostPath"
    model_claim: str = "vllm-models"
    draft_claim: str = "vllm-drafts"
    namespace: str = ""
    service_url: str = ""
    kubectl: str = "kubectl"


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
    if not _DNS_LABEL.fullmatch(text):
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


KUBE_SETTINGS: tuple[tuple[str, str | None, Callable[[object], object], object], ...] = (
    # key, environment variable, parser, default
    ("models", None, parse_models, KubeSettings.models),
    ("model_claim", None, parse_dns_label, KubeSettings.model_claim),
    ("draft_claim", None, parse_dns_label, KubeSettings.draft_claim),
    ("namespace", "KUBE_NAMESPACE", parse_namespace, KubeSettings.namespace),
    ("service_url", "KUBE_SERVICE_URL", parse_url, KubeSettings.service_url),
    ("kubectl", "KUBECTL", parse_text, KubeSettings.kubectl),
)
