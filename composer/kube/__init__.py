"""Kubernetes: the same switch as `up`, as a rollout of the rendered manifests.

Owns: the one entry point to the `kubectl` CLI (`kubectl`: the binary, namespace, kube
context and kubeconfig from the stack's `[kubernetes]` table or `--kube-context`, a
`KubectlFailed` carrying the command, every message redacted of the API key, a fix line
for an unreachable cluster), the gateway's control channel through `kubectl exec`
(`control`: `KubeExec`, an exec target for the host-side `GatewayControl`), what a
rollout asks of the cluster (`rollout`: a Deployment as the cluster has it, the variant's
overlay, the API key Secret server-side applied from stdin, `kubectl rollout status
--timeout`, the readiness gate and warm-up through a Service, a pod's log tail), the way the
gate reaches the Service (`forward`: the configured URL or `kubectl port-forward`), and the
one executor (`execute`: what the cluster runs, the plans of typed operations
(`composer.swap.ops`) of the one-variant switch and of a live set's change, run under the
project's swap lock by `composer.swap.execute` with one kubectl dispatch table; a failure or
a stop signal runs the inverses of what ran, newest first, `--no-rollback` leaves it;
signals from `composer.signals`).
Never calls Docker. May import: `composer.stack`, `composer.render`, `composer.engine`
(the readiness probe, log redaction and hints), `composer.gateway` (its control client),
`composer.swap` (the swap lock, the hold, a live change's plan, executor and result),
`composer.errors`, `composer.labels`, `composer.signals`.
Public: `Kubectl`, `KubeExec`, `KubeUpOptions`, `KubeUpResult`, `service_url`, `up_kubernetes`
(a live set's change gives the compose target's `LiveResult`, from `composer.swap.live`).
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "control": ["KubeExec"],
        "forward": ["service_url"],
        "kubectl": ["Kubectl"],
        "execute": ["up_kubernetes"],
        "rollout": ["KubeUpOptions", "KubeUpResult"],
    },
)
