"""Optional objects of the base: PodDisruptionBudgets, ServiceMonitors, scrape annotations.

- `pdb = "gateway"` (the default): a node drain may not evict the single gateway pod
  (`maxUnavailable: 0`); move it with `kubectl rollout restart`, which starts the new
  pod before the old one stops. `all` covers the vLLM pod too, `none` renders none.
- `service_monitor = true`: one ServiceMonitor (Prometheus Operator) per Service: the
  gateway's metrics at /gateway/metrics, vLLM's at /metrics. The CRD is not part of the
  Kubernetes schemas; its shape is checked against the fields the operator defines.
- `scrape_annotations = true`: `prometheus.io/scrape|port|path` on the pod templates,
  for a Prometheus that discovers pods by annotation.
"""

from __future__ import annotations

from typing import Any

from composer.stack.model import Stack

Manifest = dict[str, Any]
MONITOR_API = "monitoring.coreos.com/v1"
SERVER_METRICS = "/metrics"
GATEWAY_METRICS = "/gateway/metrics"


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
