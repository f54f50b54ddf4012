"""Kubernetes: the same switch as `up`, as a rollout of the rendered manifests.

Owns: the one entry point to the `kubectl` CLI (`kubectl`: the binary and namespace from
the stack's `[kubernetes]` table, a `KubectlFailed` carrying the command), the rollout
that switches the serving variant (`rollout`: write the variant's overlay, apply the API
key Secret from stdin, `kubectl apply -k`, `kubectl rollout status --timeout`, the
readiness gate through the Service, `kubectl rollout undo` on failure), and the way the
gate reaches the Service (`forward`: the configured URL or `kubectl port-forward`).
Never calls Docker. May import: `composer.stack`, `composer.render`, `composer.engine`
(the readiness probe, log redaction and hints), `composer.errors`, `composer.labels`.
Public: `Kubectl`, `KubeUpOptions`, `KubeUpResult`, `up_kubernetes`, `service_url`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "forward": ["service_url"],
        "kubectl": ["Kubectl"],
        "rollout": ["KubeUpOptions", "KubeUpResult", "up_kubernetes"],
    },
)
