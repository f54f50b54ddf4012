"""Kubernetes: the same switch as `up`, as a rollout of the rendered manifests.

Owns: the one entry point to the `kubectl` CLI (`kubectl`: the binary, namespace, kube
context and kubeconfig from the stack's `[kubernetes]` table or `--kube-context`, a
`KubectlFailed` carrying the command, every message redacted of the API key, a fix line
for an unreachable cluster), the gateway's control channel through `kubectl exec`
(`control`: `KubeExec`, an exec target for the host-side `GatewayControl`), the rollout
that switches the serving variant (`rollout`: under the project's swap lock, write the
variant's overlay, server-side apply the API key Secret from stdin, drain the gateway,
`kubectl apply -k`, `kubectl rollout status --timeout`, the readiness gate and warm-up
through the Service past the hold, release; `kubectl rollout undo` under the hold on
failure or interruption; signals from `composer.signals`), and the way the gate reaches
the Service (`forward`: the configured URL or `kubectl port-forward`), and the change of a
live set (`live_rollout`: the Docker live set's plan of typed operations, `composer.swap.live`,
run by `composer.swap.execute` with a kubectl dispatch table: apply and rollout status, the
gate through the variant's own Service, the gateway's upstreams and drains, delete, a
changed Deployment applied in place and undone by `rollout undo`).
Never calls Docker. May import: `composer.stack`, `composer.render`, `composer.engine`
(the readiness probe, log redaction and hints), `composer.gateway` (its control client),
`composer.swap` (the swap lock, the hold, a live change's plan, executor and result),
`composer.errors`, `composer.labels`, `composer.signals`.
Public: `Kubectl`, `KubeExec`, `KubeUpOptions`, `KubeUpResult`, `up_kubernetes`, `service_url`,
`up_kube_live` (its result is the compose target's `LiveResult`, from `composer.swap.live`).
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "control": ["KubeExec"],
        "forward": ["service_url"],
        "kubectl": ["Kubectl"],
        "live_rollout": ["up_kube_live"],
        "rollout": ["KubeUpOptions", "KubeUpResult", "up_kubernetes"],
    },
)
